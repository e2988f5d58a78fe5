use flow::prelude::*;

#[operation]
struct Fetch;

fn main() {}
