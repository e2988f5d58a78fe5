use flowdag::prelude::*;

async fn charge(line: &u32) -> Result<u32, std::io::Error> {
    Ok(*line)
}

workflow! {
    Poll(start: u32) -> u32 {
        polled = Loop(max = 0) {
            r = Operation(charge(&start)) => r
        } until (r > 3)
        => polled
    }
}

fn main() {}
