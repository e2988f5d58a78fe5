use flowdag::prelude::*;

struct Ctx;

async fn step(_: &Ctx) -> Result<u32, std::io::Error> {
    Ok(1)
}

workflow! {
    Borrowing(ctx: &'a Ctx, name: std::borrow::Cow<'b, str>) -> u32 {
        n = Operation(step(ctx))
        => n
    }
}

fn main() {
    // The workflow's interface is still there: no error here.
    let _ = Borrowing::runner();
}
