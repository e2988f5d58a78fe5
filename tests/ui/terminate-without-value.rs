use flowdag::prelude::*;

async fn compute() -> Result<u32, std::io::Error> {
    Ok(2)
}

workflow! {
    Early(stop: bool) {
        Sequential {
            Conditional(*stop) {
                Terminate(),
            },
            Operation(compute()),
        }
    }
}

fn main() {}
