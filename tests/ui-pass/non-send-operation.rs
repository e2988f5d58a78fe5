//! An operation whose future is not `Send` (it holds an `Rc` across an await) still makes a
//! workflow that compiles and runs; only its run future is not `Send`.
use flowdag::prelude::*;
use std::rc::Rc;

async fn local(n: u32) -> Result<u32, std::io::Error> {
    let shared = Rc::new(n);
    std::future::ready(()).await;
    Ok(*shared + 1)
}

workflow! {
    Local(n: u32) -> u32 {
        Sequential {
            a = Operation(local(n)),
            b = Operation(local(a)),
        }
        => b
    }
}

fn main() {
    let out = futures::executor::block_on(Local::run(1)).unwrap();
    assert_eq!(out, 3);
}
