use flowdag::prelude::*;

async fn step() -> Result<u32, std::io::Error> {
    Ok(1)
}

workflow! {
    Named() {
        checkout = Sequential {
            Operation(step()),
            Operation(step()),
        }
    }
}

fn main() {}
