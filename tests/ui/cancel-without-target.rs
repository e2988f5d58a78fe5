use flowdag::prelude::*;

async fn export_part() -> Result<u32, std::io::Error> {
    Ok(1)
}

workflow! {
    Export() {
        Parallel {
            part = Operation(export_part()),
            Cancel(),
            Cancel,
        }
    }
}

fn main() {}
