use flowdag::prelude::*;

#[operation]
struct Fetch;

fn main() {}
