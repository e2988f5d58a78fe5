use flowdag::prelude::*;

async fn len(text: &str) -> Result<usize, std::io::Error> {
    Ok(text.len())
}

workflow! {
    Head<'t>(text: &'t str, skip: &usize) -> &'s str {
        n = Operation(len(text))
        => &text[*skip..n]
    }
}

fn main() {}
