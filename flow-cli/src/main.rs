//! `flow`: the generic command line of durable flow runs (`flow --help`). It knows no workflow,
//! so `flow resume` is for a binary of the user's that registers them (see `flowdag_cli::Cli`).

fn main() -> std::process::ExitCode {
    flowdag_cli::Cli::new().run()
}
