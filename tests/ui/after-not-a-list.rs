use flowdag::prelude::*;

async fn step() -> Result<u32, std::io::Error> {
    Ok(1)
}

workflow! {
    Brackets() {
        Sequential {
            a = Operation(step()),
            Operation(step(), after = a),
        }
    }
}

fn main() {}
