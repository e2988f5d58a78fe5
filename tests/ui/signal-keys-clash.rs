use flowdag::prelude::*;

workflow! {
    Release() {
        Sequential {
            Signal(approve: u8),
            Signal(Approve: u8),
            Signal(graph: u8),
            Signal(ping: u8, transiant),
            Signal(pong),
        }
    }
}

fn main() {}
