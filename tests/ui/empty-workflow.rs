use flow::prelude::*;

workflow! {
    Nothing() {}
}

fn main() {}
