use flowdag::prelude::*;

async fn fetch() -> Result<u32, String> {
    Ok(1)
}

workflow! {
    Stringly() {
        Operation(fetch())
    }
}

fn main() {}
