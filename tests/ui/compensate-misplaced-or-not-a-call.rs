use flowdag::prelude::*;

async fn reserve() -> Result<u32, std::io::Error> {
    Ok(1)
}

async fn release(stock: &u32) -> Result<(), std::io::Error> {
    let _ = stock;
    Ok(())
}

workflow! {
    Checkout() {
        stock = Operation(reserve(), compensate = "release"),
        ForEach(i in 0..2u64, compensate = release(&stock)) {
            Operation(reserve()),
        },
    }
}

fn main() {}
