//! `let .. else` binds `user` for the statements after it: there `user` is that binding (a `&str`), not
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
            total = Operation(count((|| { let Some((user, _)) = name.split_once(' ') else { return 0 }; user.len() })())),
        }
        => total
    }
}

fn main() {
    let total = futures::executor::block_on(Lengths::run("ada lovelace"));
    assert_eq!(total.unwrap(), 3);
}
