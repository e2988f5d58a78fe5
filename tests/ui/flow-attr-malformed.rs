use flowdag::prelude::*;

async fn step() -> Result<u32, std::io::Error> {
    Ok(1)
}

workflow! {
    #[flow(krate = ::flow)]
    #[flow(speed = fast)]
    #[flow(crate = "flow")]
    #[flow(crate = ::flowdag::<u8>)]
    #[flow(crate)]
    Misconfigured() {
        Operation(step())
    }
}

fn main() {}
