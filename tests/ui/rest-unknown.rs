use flowdag::prelude::*;

async fn step() -> Result<u32, std::io::Error> {
    Ok(1)
}

workflow! {
    RestUnknown() {
        Parallel(min = 1, rest = cancle) {
            Operation(step()),
            Operation(step()),
        }
    }
}

fn main() {}
