use flowdag::prelude::*;

async fn step() -> Result<u32, std::io::Error> {
    Ok(1)
}

workflow! {
    Limit() {
        Parallel(max_concurrency =) {
            Operation(step()),
        }
    }
}

fn main() {}
