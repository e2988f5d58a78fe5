use flowdag::prelude::*;

async fn step() -> Result<u32, std::io::Error> {
    Ok(1)
}

workflow! {
    Ledger() {
        Parallel {
            Operation(step(), exclusive = ""),
            Operation(step()),
        }
    }
}

fn main() {}
