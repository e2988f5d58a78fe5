use flowdag::prelude::*;
use serde::{Serialize, de::DeserializeOwned};

async fn keep<T: Clone>(item: &T) -> Result<T, std::io::Error> {
    Ok(item.clone())
}

workflow! {
    #[flow(durable)]
    pub Keep<T>(item: T) -> T
    where
        T: Clone + Serialize + DeserializeOwned + Send + Sync + 'static,
    {
        kept = Operation(keep(&item))
        => kept.clone()
    }
}

// Not `Serialize`: `Keep<Handle>` is not a workflow.
#[derive(Clone)]
pub struct Handle(u32);

async fn start(store: &flowdag::store::MemoryStore) {
    let _ = Keep::<Handle>::runner()
        .durable(store, "k-1")
        .execute(Handle(1))
        .await;
}

fn main() {
    let _ = start;
}
