use flowdag::prelude::*;

async fn step() -> Result<u32, std::io::Error> {
    Ok(1)
}

workflow! {
    Labels() {
        Parallel {
            'work: Sequential { Operation(step()) },
            'work: Operation(step()),
        }
    }
}

fn main() {}
