use flowdag::prelude::*;

async fn step() -> Result<u32, std::io::Error> {
    Ok(1)
}

workflow! {
    RestAlone() {
        Parallel(rest = run) {
            Operation(step()),
            Operation(step()),
        }
    }
}

fn main() {}
