use flowdag::prelude::*;

async fn first<T: Clone>(items: &[T]) -> Result<T, std::io::Error> {
    items.first().cloned().ok_or_else(|| std::io::Error::other("empty"))
}

workflow! {
    First<T>(items: &[T]) where T: Clone + Send + Sync -> T {
        item = Operation(first(items))
        => item.clone()
    }
}

fn main() {}
