use flowdag::prelude::*;

async fn fetch() -> Result<u32, std::io::Error> {
    Ok(1)
}

workflow! {
    NoOutput() -> u32 {
        total = Operation(fetch())
    }
}

fn main() {}
