use flowdag::prelude::*;

async fn step() -> Result<u32, std::io::Error> {
    Ok(1)
}

workflow! {
    Test(flag: bool) {
        Conditional(flag ==) {
            Operation(step()),
        }
    }
}

fn main() {}
