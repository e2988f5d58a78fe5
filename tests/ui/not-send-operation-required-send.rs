use flowdag::prelude::*;
use std::rc::Rc;

async fn local() -> Result<u32, std::io::Error> {
    let shared = Rc::new(1);
    std::future::ready(()).await;
    Ok(*shared)
}

workflow! {
    Local() -> u32 {
        n = Operation(local())
        => n
    }
}

fn assert_send<T: Send>(_: T) {}

fn requires_send() {
    assert_send(Local::run());
}

fn main() {}
