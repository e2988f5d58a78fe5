use flowdag::prelude::*;

async fn step() -> Result<u32, std::io::Error> {
    Ok(1)
}

workflow! {
    MinAbove() {
        Parallel(min = 4) {
            Operation(step()),
            Operation(step()),
            Operation(step()),
        }
    }
}

fn main() {}
