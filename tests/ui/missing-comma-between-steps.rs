use flowdag::prelude::*;

async fn step() -> Result<u32, std::io::Error> {
    Ok(1)
}

workflow! {
    Commas() {
        Sequential {
            a = Operation(step())
            b = Operation(step()),
        }
    }
}

fn main() {}
