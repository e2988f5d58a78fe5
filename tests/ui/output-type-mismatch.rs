use flowdag::prelude::*;

async fn step() -> Result<u32, std::io::Error> {
    Ok(1)
}

workflow! {
    Mismatch() -> String {
        a = Operation(step())
        => a
    }
}

fn main() {}
