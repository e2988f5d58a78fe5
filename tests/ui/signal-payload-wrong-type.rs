use flowdag::prelude::*;

struct Approval;

async fn ship(note: &String) -> Result<usize, std::io::Error> {
    Ok(note.len())
}

workflow! {
    Release() {
        Sequential {
            ok = Signal(approve: Approval),
            Operation(ship(&ok)),
        }
    }
}

fn main() {}
