use flowdag::prelude::*;

#[operation(timout = "1s")]
async fn fetch(id: u64) -> Result<u64, std::io::Error> {
    Ok(id)
}

fn main() {}
