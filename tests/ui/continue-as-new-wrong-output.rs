use flowdag::durable::Continue;
use flowdag::prelude::*;

async fn tick(n: u32) -> Result<u32, std::io::Error> {
    Ok(n + 1)
}

// The output is not a `Continue`.
workflow! {
    #[flow(durable, continue_as_new)]
    NotContinue(n: u32) -> u32 {
        Sequential {
            next = Operation(tick(n)),
        }
        => next
    }
}

// A `Continue` whose input is not the workflow's parameters.
workflow! {
    #[flow(durable, continue_as_new)]
    WrongInput(n: u32) -> Continue<String, u32> {
        Sequential {
            next = Operation(tick(n)),
        }
        => Continue::Done(next)
    }
}

fn main() {}
