use flowdag::prelude::*;

async fn show<T: std::fmt::Display>(value: &T) -> Result<String, std::io::Error> {
    Ok(value.to_string())
}

workflow! {
    Show<T: Send + Sync>(value: T) -> String {
        text = Operation(show(&value))
        => text.clone()
    }
}

fn main() {}
