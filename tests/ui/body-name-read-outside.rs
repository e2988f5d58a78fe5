use flowdag::prelude::*;

async fn charge(line: &u32) -> Result<u32, std::io::Error> {
    Ok(*line)
}

workflow! {
    Charges(lines: &[u32]) -> u32 {
        Sequential {
            charged = ForEach(line in lines.iter()) {
                r = Operation(charge(line)) => r
            },
            total = Operation(charge(&r)),
        }
        => total
    }
}

fn main() {}
