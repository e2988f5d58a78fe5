use flowdag::prelude::*;

async fn step() -> Result<u32, std::io::Error> {
    Ok(1)
}

workflow! {
    Cycle() {
        Parallel {
            a = Operation(step(), after = [c]),
            b = Operation(step(), after = [a]),
            c = Operation(step(), after = [b]),
        }
    }
}

fn main() {}
