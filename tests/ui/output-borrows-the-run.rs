use flowdag::prelude::*;

async fn check(a: &str, b: &str) -> Result<bool, std::io::Error> {
    Ok(a.len() < b.len())
}

workflow! {
    Longer<'a>(a: &'a str, b: &str) -> &'a str {
        shorter = Operation(check(a, b))
        => if shorter { b } else { a }
    }
}

fn main() {}
