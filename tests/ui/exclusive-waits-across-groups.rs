use flowdag::prelude::*;

async fn step() -> Result<u32, std::io::Error> {
    Ok(1)
}

workflow! {
    Ledger() {
        Parallel {
            Sequential(exclusive = "ledger") {
                Operation(step()),
                Operation(step(), after = [audit_b]),
            },
            Sequential(exclusive = "audit") {
                Operation(step()),
                Operation(step(), after = [ledger_b]),
            },
            audit_b = Operation(step(), exclusive = "audit"),
            ledger_b = Operation(step(), exclusive = "ledger"),
        }
    }
}

fn main() {}
