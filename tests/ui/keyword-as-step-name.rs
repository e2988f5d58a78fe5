use flowdag::prelude::*;

async fn page(last: &Option<&()>) -> Result<u32, std::io::Error> {
    Ok(u32::from(last.is_some()))
}

workflow! {
    Pages() {
        Loop(max = 3, prev = last) while (last.is_none()) {
            fn = Operation(page(last))
        }
    }
}

fn main() {}
