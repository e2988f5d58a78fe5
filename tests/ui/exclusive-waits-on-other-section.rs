use flowdag::prelude::*;

async fn step() -> Result<u32, std::io::Error> {
    Ok(1)
}

workflow! {
    Ledger() {
        Parallel {
            Sequential(exclusive = "ledger") {
                Operation(step()),
                Operation(step(), after = [post]),
            },
            post = Operation(step(), exclusive = "ledger"),
        }
    }
}

fn main() {}
