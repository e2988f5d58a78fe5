use flowdag::prelude::*;

async fn step() -> Result<u32, std::io::Error> {
    Ok(1)
}

workflow! {
    Twice() {
        Operation(step(), timeout = "1s", timeout = "2s")
    }
}

fn main() {}
