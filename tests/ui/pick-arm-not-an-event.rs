use flowdag::prelude::*;

struct Approval;

async fn check() -> Result<bool, std::io::Error> {
    Ok(true)
}

workflow! {
    Choose() {
        Pick {
            ok = Signal(approve: Approval) => { },
            Operation(check()) => { },
            Delay("1h"),
        }
    }
}

fn main() {}
