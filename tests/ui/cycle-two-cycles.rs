use flowdag::prelude::*;

async fn step() -> Result<u32, std::io::Error> {
    Ok(1)
}

// Two separate cycles, each one error naming all its members once; `d` waits on the first
// cycle without being part of it, so it is not named.
workflow! {
    Cycles() {
        Parallel {
            a = Operation(step(), after = [c]),
            b = Operation(step(), after = [a]),
            c = Operation(step(), after = [b]),
            d = Operation(step(), after = [a]),
            Sequential {
                x = Operation(step(), after = [y]),
                y = Operation(step()),
            },
        }
    }
}

fn main() {}
