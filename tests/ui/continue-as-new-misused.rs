use flowdag::prelude::*;

async fn tick(n: u32) -> Result<u32, std::io::Error> {
    Ok(n + 1)
}

// `continue_as_new` without `durable`.
workflow! {
    #[flow(continue_as_new)]
    Plain(n: u32) -> u32 {
        Sequential {
            next = Operation(tick(n)),
        }
        => next
    }
}

// Twice.
workflow! {
    #[flow(durable, continue_as_new, continue_as_new)]
    Twice(n: u32) -> flowdag::durable::Continue<u32, u32> {
        Sequential {
            next = Operation(tick(n)),
        }
        => flowdag::durable::Continue::Done(next)
    }
}

fn main() {}
