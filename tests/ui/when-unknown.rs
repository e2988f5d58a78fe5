use flowdag::prelude::*;

async fn step() -> Result<u32, std::io::Error> {
    Ok(1)
}

workflow! {
    Cleanup() {
        Sequential {
            Operation(step()),
            Operation(step(), when = all_donee),
        }
    }
}

fn main() {}
