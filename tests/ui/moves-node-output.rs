use flowdag::prelude::*;

async fn fetch() -> Result<String, std::io::Error> {
    Ok(String::new())
}

async fn consume(s: String) -> Result<usize, std::io::Error> {
    Ok(s.len())
}

workflow! {
    Moves() {
        Sequential {
            s = Operation(fetch()),
            Operation(consume(s)),
        }
    }
}

fn main() {}
