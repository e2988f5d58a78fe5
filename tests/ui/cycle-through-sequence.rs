use flowdag::prelude::*;

async fn step() -> Result<u32, std::io::Error> {
    Ok(1)
}

workflow! {
    Loop() {
        Sequential {
            a = Operation(step(), after = [b]),
            b = Operation(step()),
        }
    }
}

fn main() {}
