use flowdag::prelude::*;

async fn step() -> Result<u32, std::io::Error> {
    Ok(1)
}

workflow! {
    OneBranch() {
        Race {
            Operation(step()),
        }
    }
}

fn main() {}
