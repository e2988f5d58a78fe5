//! Keeps `docs/dsl.md` true. Its Rust code blocks (```rust and ```rust,ignore), joined in order and followed by
//! `tests/data/dsl-reference-main.rs`, must equal `tests/ui-pass/dsl-reference.rs`, which the
//! compile test (`tests/dsl_compiletest.rs`) builds and runs. After editing the reference, refresh the
//! file with `DSL_REFERENCE=overwrite cargo test --test dsl_reference`.

use std::path::Path;

const HEADER: &str = "// Generated from docs/dsl.md by tests/dsl_reference.rs: do not edit by hand.\n\
                      #![allow(dead_code, missing_docs, unused_imports)]\n";

fn generate(root: &Path) -> String {
    let reference =
        std::fs::read_to_string(root.join("docs/dsl.md")).expect("docs/dsl.md is readable");
    let main = std::fs::read_to_string(root.join("tests/data/dsl-reference-main.rs"))
        .expect("the main is readable");
    let mut out = String::from(HEADER);
    let mut rest = reference.as_str();
    let mut block = 0;
    // The definitions are a plain ```rust block; the examples after them are ```rust,ignore,
    // since rustdoc (which shows this file as `workflow!`'s documentation) compiles each block
    // alone. Both kinds go into the file.
    while let Some(start) = rest.find("```rust") {
        let info_end = rest[start..].find('\n').map_or(rest.len(), |i| start + i);
        let info = &rest[start + "```rust".len()..info_end];
        assert!(
            info.is_empty() || info == ",ignore",
            "a ```rust block is plain or `ignore`, found ```rust{info}"
        );
        let body = &rest[(info_end + 1).min(rest.len())..];
        let end = body.find("```").expect("every ```rust block is closed");
        out.push_str(&format!("\n// ---- docs/dsl.md, block {block}\n"));
        out.push_str(&body[..end]);
        block += 1;
        rest = &body[end + 3..];
    }
    out.push('\n');
    out.push_str(&main);
    out
}

#[test]
fn dsl_reference_blocks_are_the_compiled_file() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let generated = generate(root);
    let path = root.join("tests/ui-pass/dsl-reference.rs");
    if std::env::var_os("DSL_REFERENCE").is_some_and(|v| v == "overwrite") {
        std::fs::write(&path, &generated).expect("tests/ui-pass is writable");
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "docs/dsl.md changed: refresh tests/ui-pass/dsl-reference.rs with \
         `DSL_REFERENCE=overwrite cargo test --test dsl_reference`"
    );
}
