use flowdag::prelude::*;

async fn step() -> Result<u32, std::io::Error> {
    Ok(1)
}

workflow! {
    Twice() {
        Sequential {
            order = Operation(step()),
            order = Operation(step()),
        }
    }
}

fn main() {}
