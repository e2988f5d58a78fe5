//! Each `let` of a chain binds for the rest of the chain and the branch: there `user` is that binding (a `&str`), not
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
            total = Operation(count(if let Some((user, rest)) = name.split_once(' ') && let Some(last) = rest.strip_suffix(user) { last.len() } else { 0 })),
        }
        => total
    }
}

fn main() {
    let total = futures::executor::block_on(Lengths::run("ab cdab"));
    assert_eq!(total.unwrap(), 2);
}
