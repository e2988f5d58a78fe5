//! A `match` arm's pattern, and its guard, bind `user`: there `user` is that binding (a `&str`), not
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
            total = Operation(count(match name.split_once(' ') { Some((user, _)) if user.len() > 1 => user.len(), _ => 0 })),
        }
        => total
    }
}

fn main() {
    let total = futures::executor::block_on(Lengths::run("ada lovelace"));
    assert_eq!(total.unwrap(), 3);
}
