use flowdag::prelude::*;

async fn export_part() -> Result<u32, std::io::Error> {
    Ok(1)
}

workflow! {
    Export() {
        Sequential {
            part = Operation(export_part()),
            Cancel(part),
        }
    }
}

fn main() {}
