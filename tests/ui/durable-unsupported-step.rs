use flowdag::prelude::*;

async fn remind(order: u64) -> Result<u64, std::io::Error> {
    Ok(order)
}

workflow! {
    Notice(order: u64) {
        Operation(remind(order))
    }
}

workflow! {
    #[flow(durable)]
    Reminder(order: u64) {
        Sequential {
            Delay("1h"),
            ForEach(i in 0..order) {
                Operation(remind(i)),
            },
            ForEach(i in 0..order, min = 1, rest = run) {
                Operation(remind(i)),
            },
            Workflow(Notice(order)),
        }
    }
}

fn main() {}
