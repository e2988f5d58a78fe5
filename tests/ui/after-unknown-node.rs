use flowdag::prelude::*;

async fn step() -> Result<u32, std::io::Error> {
    Ok(1)
}

workflow! {
    Unknown() {
        Parallel {
            fetch = Operation(step()),
            store = Operation(step(), after = [ghost]),
        }
    }
}

fn main() {}
