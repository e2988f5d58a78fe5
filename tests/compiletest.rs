//! Compile-fail and compile-pass tests of `workflow!` and `#[operation]`.
//!
//! Each file in `tests/ui/` is one mistake, with the reviewed compiler output beside it in a
//! `.stderr` file; each file in `tests/ui-pass/` must compile. Regenerate the snapshots with
//! `TRYBUILD=overwrite cargo test --test compiletest`, then read every changed `.stderr`.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
    t.pass("tests/ui-pass/*.rs");
}
