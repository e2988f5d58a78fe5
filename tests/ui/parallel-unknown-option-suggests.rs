use flowdag::prelude::*;

async fn step() -> Result<u32, std::io::Error> {
    Ok(1)
}

workflow! {
    Options() {
        Parallel(max_concurency = 2) {
            Operation(step()),
            Operation(step()),
        }
    }
}

fn main() {}
