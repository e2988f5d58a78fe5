use flowdag::prelude::*;

async fn count() -> u32 {
    1
}

workflow! {
    Plain() {
        Operation(count())
    }
}

fn main() {}
