use flowdag::prelude::*;

async fn echo(text: &str) -> Result<String, std::io::Error> {
    Ok(text.to_owned())
}

// A durable workflow's parameters are stored with the run: it cannot borrow.
workflow! {
    #[flow(durable)]
    Echo<'a>(text: String) -> String {
        said = Operation(echo(&text))
        => said.clone()
    }
}

fn main() {}
