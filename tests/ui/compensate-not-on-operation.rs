use flowdag::prelude::*;

async fn reserve() -> Result<u32, std::io::Error> {
    Ok(1)
}

async fn release() -> Result<(), std::io::Error> {
    Ok(())
}

workflow! {
    Checkout() {
        Parallel(compensate = release()) {
            Operation(reserve()),
            Operation(reserve()),
        }
    }
}

fn main() {}
