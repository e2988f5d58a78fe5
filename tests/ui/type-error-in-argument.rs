use flowdag::prelude::*;

async fn fetch(id: u64) -> Result<u64, std::io::Error> {
    Ok(id)
}

workflow! {
    Typed() {
        Operation(fetch("forty-two"))
    }
}

fn main() {}
