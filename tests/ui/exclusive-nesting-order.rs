use flowdag::prelude::*;

async fn step() -> Result<u32, std::io::Error> {
    Ok(1)
}

workflow! {
    Ledger() {
        Parallel {
            Sequential(exclusive = "ledger") {
                Operation(step()),
                Operation(step(), exclusive = "audit"),
            },
            Sequential(exclusive = "audit") {
                Operation(step()),
                Operation(step(), exclusive = "ledger"),
            },
        }
    }
}

fn main() {}
