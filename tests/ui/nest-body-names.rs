use flowdag::prelude::*;

async fn charge(line: &u32) -> Result<u32, std::io::Error> {
    Ok(*line)
}

workflow! {
    Names(lines: &[u32]) {
        Sequential {
            first = Operation(charge(&lines[0])),
            ForEach(line in lines.iter()) {
                first = Operation(charge(line)),
                line = Operation(charge(line)),
                Signal(go: u32),
            },
        }
    }
}

fn main() {}
