use flowdag::prelude::*;

async fn echo<T: Clone>(value: &T) -> Result<T, std::io::Error> {
    Ok(value.clone())
}

workflow! {
    /// A mistake in a generic workflow's body: its interface is still there.
    Echo<'a, T: Clone + Send + Sync>(value: &'a T, times: &usize) -> (&'a T, T) {
        Parallel(max_concurrency = 0) {
            copy = Operation(echo(value)),
            Operation(echo(times)),
        }
        => (value, copy.clone())
    }
}

fn main() {
    // No error here: `Echo` still has its generics, `run` and `GRAPH`.
    let value = 5u32;
    let _ = Echo::run(&value, &2);
    let _ = Echo::<u64>::GRAPH;
    let _ = Echo::<String>::runner();
}
