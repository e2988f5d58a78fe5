use flowdag::prelude::*;

async fn lookup() -> Result<Option<u32>, std::io::Error> {
    Ok(Some(1))
}

async fn compute() -> Result<u32, std::io::Error> {
    Ok(2)
}

workflow! {
    Cached() -> u32 {
        Sequential {
            cached = Operation(lookup()),
            Conditional(cached.is_ok_and(|c| c.is_some())) {
                Terminate(cached),
            },
            value = Operation(compute()),
        }
        => value
    }
}

fn main() {}
