use flow::prelude::*;

async fn remind(order: u64) -> Result<u64, std::io::Error> {
    Ok(order)
}

workflow! {
    #[flow(durable)]
    Reminder(order: u64) -> u64 {
        Sequential {
            Delay("1h"),
            sent = Operation(remind(order)),
        }
        => sent
    }
}

fn main() {}
