use flowdag::prelude::*;

async fn step() -> Result<u32, std::io::Error> {
    Ok(1)
}

workflow! {
    Many(id: u64) {
        Sequential {
            id = Operation(step()),
            Parallel(max_concurrency = 0) {
                a = Operation(step(), timeout = "forever"),
                Operation(step(), after = [nowhere]),
            },
            Parallel {},
        }
    }
}

fn main() {}
