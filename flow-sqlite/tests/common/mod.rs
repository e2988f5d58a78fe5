//! Fresh store files for the tests, under cargo's temporary directory for this target.

use std::path::PathBuf;

/// An empty directory of its own for the test `name` (removed and made again).
pub fn dir(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("flowdag-sqlite")
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    dir
}
