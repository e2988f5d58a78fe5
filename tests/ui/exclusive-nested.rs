use flowdag::prelude::*;

async fn step() -> Result<u32, std::io::Error> {
    Ok(1)
}

workflow! {
    Ledger() {
        Sequential(exclusive = "ledger") {
            Operation(step()),
            Parallel {
                Operation(step(), exclusive = "ledger"),
                Operation(step(), exclusive = "audit"),
            },
        }
    }
}

fn main() {}
