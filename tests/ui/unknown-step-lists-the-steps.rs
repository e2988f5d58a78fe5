use flowdag::prelude::*;

async fn step() -> Result<u32, std::io::Error> {
    Ok(1)
}

workflow! {
    Unknown() {
        Gather { Operation(step()) }
    }
}

fn main() {}
