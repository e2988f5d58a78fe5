use flowdag::prelude::*;

async fn step(id: u64) -> Result<u64, std::io::Error> {
    Ok(id)
}

workflow! {
    Twice(id: u64, id: u64) {
        Operation(step(id))
    }
}

fn main() {}
