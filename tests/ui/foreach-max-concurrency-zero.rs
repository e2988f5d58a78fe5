use flowdag::prelude::*;

async fn charge(line: &u32) -> Result<u32, std::io::Error> {
    Ok(*line)
}

workflow! {
    Charges(lines: &[u32]) -> Vec<u32> {
        charged = ForEach(line in lines.iter(), max_concurrency = 0) {
            r = Operation(charge(line)) => r
        }
        => charged.clone()
    }
}

fn main() {}
