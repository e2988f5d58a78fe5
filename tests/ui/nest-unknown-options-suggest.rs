use flowdag::prelude::*;

async fn charge(line: &u32) -> Result<u32, std::io::Error> {
    Ok(*line)
}

workflow! {
    Options(lines: &[u32]) {
        Sequential {
            ForEach(line in lines.iter(), max_concurency = 4, on_failure = colect) {
                Operation(charge(line))
            },
            Loop(max = 3, on_mx = stop) { r = Operation(charge(&lines[0])) } until (r > 1),
            Loop(prev = last) { r = Operation(charge(&lines[0])) } until (r > 1),
        }
    }
}

fn main() {}
