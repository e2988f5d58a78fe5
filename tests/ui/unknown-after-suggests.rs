use flowdag::prelude::*;

async fn step() -> Result<u32, std::io::Error> {
    Ok(1)
}

workflow! {
    Suggests() {
        Parallel {
            fetch_user = Operation(step()),
            store = Operation(step(), after = [fetch_usr]),
        }
    }
}

fn main() {}
