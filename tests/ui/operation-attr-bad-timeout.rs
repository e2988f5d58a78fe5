use flowdag::prelude::*;

#[operation(timeout = "soon")]
async fn fetch(id: u64) -> Result<u64, std::io::Error> {
    Ok(id)
}

fn main() {}
