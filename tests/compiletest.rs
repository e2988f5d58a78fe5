//! Compile-fail and compile-pass tests of `workflow!` and `#[operation]`.
//!
//! Each file in `tests/ui/` is one mistake, with the reviewed compiler output beside it in a
//! `.stderr` file; each file in `tests/ui-pass/` must compile. Regenerate the snapshots with
//! `TRYBUILD=overwrite cargo test --test compiletest`, then read every changed `.stderr`.
//! `UI=cycle-*` runs only the cases whose file name matches that glob.

#[test]
fn ui() {
    let only = std::env::var("UI").unwrap_or_else(|_| "*".to_string());
    let t = trybuild::TestCases::new();
    t.compile_fail(format!("tests/ui/{only}.rs"));
    t.pass(format!("tests/ui-pass/{only}.rs"));
}
