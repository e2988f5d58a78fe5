use flow::prelude::*;

async fn remind(order: u64, approved: bool) -> Result<u64, std::io::Error> {
    Ok(if approved { order } else { 0 })
}

workflow! {
    #[flow(durable)]
    Reminder(order: u64) -> u64 {
        Sequential {
            Delay("1h"),
            approved = Signal(approve: bool),
            sent = Operation(remind(order, approved)),
        }
        => sent
    }
}

fn main() {}
