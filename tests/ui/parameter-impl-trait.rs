use flowdag::prelude::*;

async fn step(n: u32) -> Result<u32, std::io::Error> {
    Ok(n)
}

workflow! {
    Generic(make: impl Fn() -> u32) -> u32 {
        n = Operation(step(make()))
        => n
    }
}

fn main() {}
