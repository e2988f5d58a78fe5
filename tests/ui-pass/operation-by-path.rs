//! Steps may call an operation by path, and an `#[operation]` fn keeps its signature.
use flowdag::prelude::*;

mod payments {
    use flowdag::prelude::*;

    #[derive(Debug)]
    pub struct Declined;

    impl std::fmt::Display for Declined {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("declined")
        }
    }

    impl std::error::Error for Declined {}

    #[operation(name = "charge card", timeout = "2s")]
    pub async fn charge(amount: &u32) -> Result<u32, Declined> {
        if *amount > 100 {
            Err(Declined)
        } else {
            Ok(*amount)
        }
    }
}

#[operation]
async fn price(item: &str) -> Result<u32, std::io::Error> {
    Ok(item.len() as u32)
}

workflow! {
    Checkout(item: &str) -> u32 {
        Sequential {
            amount = Operation(price(item)),
            receipt = Operation(payments::charge(&amount)),
        }
        => receipt
    }
}

// The `timeout` of `charge` uses tokio's timer.
#[tokio::main(flavor = "current_thread")]
async fn main() {
    // Still callable as ordinary Rust.
    assert_eq!(payments::charge(&7).await.unwrap(), 7);
    assert_eq!(Checkout::run("pear").await.unwrap(), 4);
}
