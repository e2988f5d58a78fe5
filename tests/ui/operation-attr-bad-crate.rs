use flowdag::prelude::*;

#[operation(crate = "flow")]
async fn fetch(id: u64) -> Result<u64, std::io::Error> {
    Ok(id)
}

fn main() {}
