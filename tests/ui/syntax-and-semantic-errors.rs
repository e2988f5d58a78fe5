use flowdag::prelude::*;

async fn step() -> Result<u32, std::io::Error> {
    Ok(1)
}

workflow! {
    Both() {
        Sequential {
            Operation(step(), after = [missing]),
            Operation(step() +),
        }
    }
}

fn main() {}
