use flowdag::prelude::*;

async fn export_part() -> Result<u32, std::io::Error> {
    Ok(1)
}

workflow! {
    Export(abort: bool) {
        Parallel {
            part = Operation(export_part()),
            'upload: Operation(export_part()),
            Conditional(abort) {
                Cancel(prat),
            },
            Conditional(!abort) {
                Cancel(upload),
            },
        }
    }
}

fn main() {}
