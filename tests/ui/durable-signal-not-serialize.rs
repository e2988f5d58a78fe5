use flowdag::prelude::*;

struct Approval {
    by: String,
}

async fn ship(order: u64, approval: &Approval) -> Result<String, std::io::Error> {
    Ok(format!("{order} by {}", approval.by))
}

workflow! {
    #[flow(durable)]
    Approve(order: u64) -> String {
        Sequential {
            approval = Signal(approve: Approval),
            sent = Operation(ship(order, &approval)),
        }
        => sent.clone()
    }
}

fn main() {}
