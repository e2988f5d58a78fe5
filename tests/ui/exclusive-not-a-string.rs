use flowdag::prelude::*;

async fn step() -> Result<u32, std::io::Error> {
    Ok(1)
}

workflow! {
    Ledger() {
        Parallel {
            Operation(step(), exclusive = ledger),
            Sequential(exclusive = 1) {
                Operation(step()),
            },
        }
    }
}

fn main() {}
