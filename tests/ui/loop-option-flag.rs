use flowdag::prelude::*;

async fn charge(line: &u32) -> Result<u32, std::io::Error> {
    Ok(*line)
}

// An option written as a flag is one error: the `max` before it is not reported missing.
workflow! {
    Poll(start: u32) -> u32 {
        polled = Loop(max = 3, stop_at_max) {
            r = Operation(charge(&start)) => r
        } until (r > 3)
        => polled
    }
}

fn main() {}
