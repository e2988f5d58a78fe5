use flowdag::prelude::*;

async fn charge(line: &u32) -> Result<u32, std::io::Error> {
    Ok(*line)
}

workflow! {
    Poll(start: u32) -> u32 {
        polled = Loop(max = 5) {
            r = Operation(charge(&start)) => r
        } until (start > 3)
        => polled
    }
}

fn main() {}
