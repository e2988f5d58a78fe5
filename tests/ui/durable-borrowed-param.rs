use flowdag::prelude::*;

async fn greet(name: &str) -> Result<String, std::io::Error> {
    Ok(format!("hello {name}"))
}

workflow! {
    #[flow(durable)]
    Greet(name: &str) -> String {
        Sequential {
            text = Operation(greet(name)),
        }
        => text.clone()
    }
}

fn main() {}
