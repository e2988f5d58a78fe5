use flowdag::prelude::*;

workflow! {
    Wait() {
        Sequential {
            Delay("2 weeks"),
            Delay("1.5h"),
            Delay(),
        }
    }
}

fn main() {}
