use flowdag::prelude::*;

async fn reserve() -> Result<u32, std::io::Error> {
    Ok(1)
}

async fn charge(stock: &u32) -> Result<u32, std::io::Error> {
    Ok(*stock)
}

async fn release(stock: &u32, receipt: &u32) -> Result<(), std::io::Error> {
    let _ = (stock, receipt);
    Ok(())
}

workflow! {
    Checkout() {
        Sequential {
            // `receipt` runs after `stock`: its output does not exist when `stock` completes.
            stock = Operation(reserve(), compensate = release(&stock, &receipt)),
            receipt = Operation(charge(&stock)),
        }
    }
}

fn main() {}
