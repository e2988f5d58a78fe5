use flowdag::prelude::*;

async fn step() -> Result<u32, std::io::Error> {
    Ok(1)
}

workflow! {
    Fraction() {
        Operation(step(), timeout = "1.5s")
    }
}

fn main() {}
