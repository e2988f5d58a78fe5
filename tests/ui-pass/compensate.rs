//! `compensate = ..` reads the step's own output, what the step reads, the parameters, and
//! any step that runs before it; inside a `ForEach` body too.
use flowdag::prelude::*;

async fn reserve(item: &str) -> Result<u32, std::io::Error> {
    Ok(item.len() as u32)
}

async fn charge(order: u64, stock: &u32) -> Result<u32, std::io::Error> {
    Ok(order as u32 + stock)
}

async fn refund(order: u64, receipt: &u32, stock: &u32) -> Result<(), std::io::Error> {
    let _ = (order, receipt, stock);
    Ok(())
}

async fn release(item: &str) -> Result<(), std::io::Error> {
    let _ = item;
    Ok(())
}

workflow! {
    Checkout(order: u64, item: String) -> u32 {
        Sequential {
            stock = Operation(reserve(&item), compensate = release(&item)),
            receipt = Operation(charge(order, &stock), retries = 2, compensate = refund(order, &receipt, &stock)),
            ForEach(i in 0..3u64, max_concurrency = 2) {
                Operation(charge(i, &stock), compensate = refund(i, &stock, &stock)),
            },
        }
        => receipt
    }
}

fn main() {}
