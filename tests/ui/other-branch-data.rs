use flowdag::prelude::*;

async fn fetch() -> Result<u32, std::io::Error> {
    Ok(1)
}

async fn score(order: &u32) -> Result<u32, std::io::Error> {
    Ok(*order)
}

workflow! {
    Branches(flag: bool) {
        Conditional(flag) {
            order = Operation(fetch()),
        } else {
            Operation(score(&order)),
        }
    }
}

fn main() {}
