use flowdag::prelude::*;

async fn make<T: Default>() -> Result<T, std::io::Error> {
    Ok(T::default())
}

workflow! {
    Make<T: Default + Send + Sync>() {
        Operation(make::<T>())
    }
}

fn main() {
    // Nothing says which `T`: `Make::<u32>::run()` would.
    let _ = Make::run();
}
