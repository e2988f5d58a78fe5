use flow::prelude::*;

async fn step() -> Result<u32, std::io::Error> {
    Ok(1)
}

workflow! {
    #[flow(krate = ::flow)]
    #[flow(speed = fast)]
    #[flow(crate = "flow")]
    #[flow(crate = ::flow::<u8>)]
    #[flow(crate)]
    Misconfigured() {
        Operation(step())
    }
}

fn main() {}
