use flowdag::prelude::*;

async fn step() -> Result<u32, std::io::Error> {
    Ok(1)
}

workflow! {
    Options() {
        Sequential(max_concurrency = 2) {
            Operation(step()),
        }
    }
}

fn main() {}
