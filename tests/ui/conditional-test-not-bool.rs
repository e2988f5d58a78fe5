use flowdag::prelude::*;

async fn fetch() -> Result<u32, std::io::Error> {
    Ok(1)
}

workflow! {
    Test() {
        Sequential {
            order = Operation(fetch()),
            Conditional(order) {
                Operation(fetch()),
            },
        }
    }
}

fn main() {}
