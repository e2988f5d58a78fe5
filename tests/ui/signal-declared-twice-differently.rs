use flowdag::prelude::*;

struct Approval;

workflow! {
    Release() {
        Sequential {
            Signal(approve: Approval),
            Signal(approve: String),
            Signal(ping: u8, transient),
            Signal(ping: u8),
        }
    }
}

fn main() {}
