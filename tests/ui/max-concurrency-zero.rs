use flowdag::prelude::*;

async fn step() -> Result<u32, std::io::Error> {
    Ok(1)
}

workflow! {
    Limited() {
        Parallel(max_concurrency = 0) {
            Operation(step()),
            Operation(step()),
        }
    }
}

fn main() {}
