use flowdag::prelude::*;

async fn step(n: &u32) -> Result<u32, std::io::Error> {
    Ok(*n)
}

workflow! {
    Shapes(xs: &[u32]) {
        Sequential {
            ForEach(x in xs.iter()) {},
            ForEach(xs.iter()) { Operation(step(&1)) },
            Loop(max = 3) { r = Operation(step(&1)) },
            Workflow(Shapes),
            Complete(),
        }
    }
}

fn main() {}
