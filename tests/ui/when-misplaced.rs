use flowdag::prelude::*;

async fn step() -> Result<u32, std::io::Error> {
    Ok(1)
}

workflow! {
    Misplaced() {
        Sequential(when = all_done) {
            Operation(step(), when = one_failed),
            Parallel(when = all_done) {
                Operation(step()),
                Operation(step(), when = 3),
            },
            Race(when = all_done) {
                Operation(step()),
                Operation(step()),
            },
        }
    }
}

fn main() {}
