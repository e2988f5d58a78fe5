use flowdag::prelude::*;

async fn step() -> Result<u32, std::io::Error> {
    Ok(1)
}

workflow! {
    Output() -> u32 {
        a = Operation(step())
        => a +
    }
}

fn main() {}
