use flowdag::prelude::*;

struct Config {
    retries: u32,
}

async fn load(config: &Config) -> Result<u32, std::io::Error> {
    Ok(config.retries)
}

workflow! {
    #[flow(durable)]
    Setup(config: Config) -> u32 {
        Sequential {
            n = Operation(load(&config)),
        }
        => n
    }
}

fn main() {}
