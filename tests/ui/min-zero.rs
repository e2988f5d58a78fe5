use flowdag::prelude::*;

async fn step() -> Result<u32, std::io::Error> {
    Ok(1)
}

workflow! {
    MinZero() {
        Parallel(min = 0) {
            Operation(step()),
            Operation(step()),
        }
    }
}

fn main() {}
