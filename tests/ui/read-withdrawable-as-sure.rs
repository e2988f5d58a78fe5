use flowdag::prelude::*;

async fn replica(n: u32) -> Result<u32, std::io::Error> {
    Ok(n)
}

async fn use_value(value: &u32) -> Result<u32, std::io::Error> {
    Ok(*value)
}

workflow! {
    Sure() {
        Sequential {
            Race {
                a = Operation(replica(1)),
                b = Operation(replica(2)),
            },
            Operation(use_value(a)),
        }
    }
}

fn main() {}
