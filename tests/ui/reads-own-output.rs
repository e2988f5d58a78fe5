use flowdag::prelude::*;

async fn add_one(n: &u32) -> Result<u32, std::io::Error> {
    Ok(n + 1)
}

workflow! {
    Itself() {
        count = Operation(add_one(&count))
    }
}

fn main() {}
