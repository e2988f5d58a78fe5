use flowdag::prelude::*;

async fn export_part() -> Result<u32, std::io::Error> {
    Ok(1)
}

async fn report(part: &u32) -> Result<(), std::io::Error> {
    let _ = part;
    Ok(())
}

workflow! {
    Export(abort: bool) {
        Sequential {
            Parallel {
                part = Operation(export_part()),
                Conditional(abort) {
                    Cancel(part),
                },
            },
            // `part` may have been withdrawn: here it is an `Option<&u32>`.
            Operation(report(&part)),
        }
    }
}

fn main() {}
