use flowdag::prelude::*;

async fn step() -> Result<u32, std::io::Error> {
    Ok(1)
}

async fn save(value: &u32) -> Result<u32, std::io::Error> {
    Ok(*value)
}

workflow! {
    Unknown() {
        Sequential {
            fetch_user = Operation(step()),
            Operation(save(&fetch_usr)),
            Conditional(fetch_uesr.is_ok()) {
                Operation(step()),
            },
        }
    }
}

fn main() {}
