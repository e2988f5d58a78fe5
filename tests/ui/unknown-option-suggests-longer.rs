use flowdag::prelude::*;

async fn step() -> Result<u32, std::io::Error> {
    Ok(1)
}

workflow! {
    Options() {
        Operation(step(), retry = 3)
    }
}

fn main() {}
