use flowdag::prelude::*;

async fn charge(line: &u32) -> Result<u32, std::io::Error> {
    Ok(*line)
}

workflow! {
    Early(start: u32) {
        Parallel {
            polled = Loop(max = 5) {
                r = Operation(charge(&start)) => r
            } until (r > 3),
            Complete(polled),
            Complete(poled),
        }
    }
}

workflow! {
    Late(lines: &[u32]) {
        Sequential {
            charged = ForEach(line in lines.iter()) { Operation(charge(line)) },
            Complete(charged),
        }
    }
}

fn main() {}
