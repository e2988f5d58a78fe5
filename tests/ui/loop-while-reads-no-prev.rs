use flowdag::prelude::*;

async fn charge(line: &u32) -> Result<u32, std::io::Error> {
    Ok(*line)
}

workflow! {
    Pages(start: u32) -> Option<u32> {
        pages = Loop(max = 5, prev = last) while (start > 3) {
            r = Operation(charge(&start)) => r
        }
        => pages
    }
}

workflow! {
    NoPrev(start: u32) -> Option<u32> {
        pages = Loop(max = 5) while (start > 3) {
            r = Operation(charge(&start)) => r
        }
        => pages
    }
}

workflow! {
    ReadsBody(start: u32) -> Option<u32> {
        pages = Loop(max = 5, prev = last) while (last.is_none() || r > 2) {
            r = Operation(charge(&start)) => r
        }
        => pages
    }
}

fn main() {}
