//! `while let` binds `user` in its body: there `user` is that binding (a `&str`), not
//! the node `user` (a `u64`). Reading the node here would be an error twice over: the step runs
//! beside `user` in a `Parallel`, and a `u64` has no `len`.
use flowdag::prelude::*;

async fn load_user() -> Result<u64, std::io::Error> {
    Ok(7)
}

async fn count(n: usize) -> Result<usize, std::io::Error> {
    Ok(n)
}

workflow! {
    Lengths(name: &str) -> usize {
        Parallel {
            user = Operation(load_user()),
            total = Operation(count({ let mut words = name.split(' '); let mut n = 0; while let Some(user) = words.next() { n += user.len(); } n })),
        }
        => total
    }
}

fn main() {
    let total = futures::executor::block_on(Lengths::run("ada lovelace"));
    assert_eq!(total.unwrap(), 11);
}
