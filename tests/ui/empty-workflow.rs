use flowdag::prelude::*;

workflow! {
    Nothing() {}
}

fn main() {}
