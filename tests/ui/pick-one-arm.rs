use flowdag::prelude::*;

async fn expire() -> Result<(), std::io::Error> {
    Ok(())
}

workflow! {
    Lonely() {
        Pick {
            Delay("48h") => { Operation(expire()) },
        }
    }
}

fn main() {}
