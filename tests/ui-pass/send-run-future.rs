//! The run future of a workflow whose operations' futures are `Send` is `Send`, and can be
//! handed to anything with a `tokio::spawn`-like bound.
use flowdag::prelude::*;
use std::future::Future;

async fn fetch(id: u64) -> Result<u64, std::io::Error> {
    std::future::ready(()).await;
    Ok(id)
}

async fn double(n: &u64) -> Result<u64, std::io::Error> {
    Ok(n * 2)
}

workflow! {
    pub Doubled(id: u64) -> u64 {
        Sequential {
            n = Operation(fetch(id)),
            d = Operation(double(&n)),
        }
        => d
    }
}

fn assert_send<T: Send>(_: T) {}

/// The bound of `tokio::spawn`.
fn spawn_like<F>(future: F) -> F
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    future
}

fn main() {
    assert_send(Doubled::run(1));
    assert_send(Doubled::runner().execute(1));
    let run = spawn_like(Doubled::run(21));
    assert_eq!(futures::executor::block_on(run).unwrap(), 42);
}
