use flowdag::prelude::*;

struct Approval;

workflow! {
    Choose() {
        Pick {
            first = Signal(approve: Approval) => { },
            second = Signal(approve: Approval) => { },
            Delay("1h") => { },
        }
    }
}

fn main() {}
