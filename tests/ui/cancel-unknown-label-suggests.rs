use flowdag::prelude::*;

async fn export_part() -> Result<u32, std::io::Error> {
    Ok(1)
}

async fn upload(part: &u32) -> Result<(), std::io::Error> {
    let _ = part;
    Ok(())
}

workflow! {
    Export(abort: bool) {
        Parallel {
            'export: Sequential {
                part = Operation(export_part()),
                Operation(upload(&part)),
            },
            Conditional(abort) {
                Cancel('exprt),
            },
        }
    }
}

fn main() {}
