use flowdag::prelude::*;

async fn charge(line: &u32) -> Result<u32, std::io::Error> {
    Ok(*line)
}

workflow! {
    Charges(count: u32) -> Vec<u32> {
        charged = ForEach(line in count) {
            r = Operation(charge(&line)) => r
        }
        => charged.clone()
    }
}

fn main() {}
