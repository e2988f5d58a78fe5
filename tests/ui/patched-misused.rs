use flowdag::prelude::*;

async fn step(n: u64) -> Result<u64, std::io::Error> {
    Ok(n)
}

workflow! {
    Misused(items: Vec<u64>) {
        Sequential {
            Patched("fast ship") { Operation(step(1)) },
            Patched("twice") { Operation(step(2)) } else { Operation(step(3)) },
            Patched("twice") { Operation(step(4)) },
            Patched(fast) { Operation(step(5)) },
            ForEach(item in items.clone()) {
                Patched("inside") { Operation(step(*item)) },
            },
        }
    }
}

fn main() {}
