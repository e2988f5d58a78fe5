use flowdag::prelude::*;

async fn remind(order: u64) -> Result<u64, std::io::Error> {
    Ok(order)
}

workflow! {
    Notice(order: u64) -> u64 {
        sent = Operation(remind(order))
        => sent
    }
}

// A durable workflow's child runs as a durable run of its own: it must be durable too.
workflow! {
    #[flow(durable)]
    Reminder(order: u64) -> u64 {
        noticed = Workflow(Notice(order))
        => noticed
    }
}

fn main() {}
