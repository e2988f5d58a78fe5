//! Compile-fail and compile-pass tests of `workflow!` and `#[operation]`.
//!
//! Each file in `tests/ui/` is one mistake, with the reviewed compiler output beside it in a
//! `.stderr` file; each file in `tests/ui-pass/` must compile. Regenerate the snapshots with
//! `TRYBUILD=overwrite cargo test --test compiletest`, then read every changed `.stderr`.
//! `UI=cycle-*` (a file name without `.rs`, or a glob) runs only the cases it names.

use std::path::Path;

#[test]
fn ui() {
    let only = std::env::var("UI").unwrap_or_else(|_| "*".to_string());
    // A glob may match nothing in one of the two directories; a plain name must exist.
    let wanted = |dir: &str| {
        let path = format!("tests/{dir}/{only}.rs");
        (only.contains(['*', '?', '[']) || Path::new(&path).exists()).then_some(path)
    };
    let t = trybuild::TestCases::new();
    if let Some(cases) = wanted("ui") {
        t.compile_fail(cases);
    }
    if let Some(cases) = wanted("ui-pass") {
        t.pass(cases);
    }
}
