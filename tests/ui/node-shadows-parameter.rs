use flowdag::prelude::*;

async fn fetch(id: u64) -> Result<u64, std::io::Error> {
    Ok(id)
}

workflow! {
    Shadow(order: u64) {
        order = Operation(fetch(order))
    }
}

fn main() {}
