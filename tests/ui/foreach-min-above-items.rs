use flowdag::prelude::*;

async fn charge(line: &u32) -> Result<u32, std::io::Error> {
    Ok(*line)
}

workflow! {
    Quorum() -> Vec<u32> {
        got = ForEach(mirror in [1u32, 2, 3], min = 4) {
            r = Operation(charge(&mirror)) => r
        }
        => got.clone()
    }
}

fn main() {}
