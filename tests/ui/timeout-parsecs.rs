use flowdag::prelude::*;

async fn step() -> Result<u32, std::io::Error> {
    Ok(1)
}

workflow! {
    Slow() {
        Operation(step(), timeout = "5 parsecs")
    }
}

fn main() {}
