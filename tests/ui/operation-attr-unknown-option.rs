use flowdag::prelude::*;

#[operation(colour = "red")]
async fn fetch(id: u64) -> Result<u64, std::io::Error> {
    Ok(id)
}

fn main() {}
