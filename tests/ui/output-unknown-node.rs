use flowdag::prelude::*;

async fn step() -> Result<u32, std::io::Error> {
    Ok(1)
}

workflow! {
    Output() -> u32 {
        total = Operation(step())
        => totl
    }
}

fn main() {}
