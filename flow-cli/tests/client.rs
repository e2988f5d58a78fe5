//! `flow signal` opens the store as a client: it sends while another process (a worker, the
//! application) owns the store, when every other command is refused with the owner's lock.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use flowdag_runtime::store::{NewRun, Owner, Store};
use flowdag_sqlite::SqliteStore;

fn flow(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_flow"))
        .args(args)
        .output()
        .expect("the binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A store file with one unfinished run, `waiting`, created by `owner`.
async fn store_with_a_run(owner: &SqliteStore) {
    owner
        .create_run(NewRun::new(
            "waiting",
            "Order",
            1,
            Owner::process(),
            Duration::from_secs(3600),
        ))
        .await
        .expect("creates");
}

fn path(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a directory");
    dir.join("runs.db")
}

#[tokio::test]
async fn signal_is_sent_while_another_process_owns_the_store() {
    let db = path("signal-owned");
    let owner = SqliteStore::open(&db).expect("the owner opens the store");
    store_with_a_run(&owner).await;
    let db = db.to_str().expect("utf-8");

    let output = flow(&["signal", db, "waiting", "approve", r#"{"by":"ann"}"#]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert!(
        text(&output.stdout).contains("signal `approve` stored for run `waiting`"),
        "{}",
        text(&output.stdout)
    );
    let signals = owner.signals("waiting", 0).await.expect("reads");
    assert_eq!(signals.len(), 1);
    assert_eq!(signals[0].payload, br#"{"by":"ann"}"#);
    // The owner's lease is untouched: a client frees nothing.
    let runs = owner.list_runs(&Default::default()).await.expect("lists");
    assert!(runs[0].owner.is_some(), "{runs:?}");

    // A run that does not exist and a bad payload are refused as before.
    let output = flow(&["signal", db, "nope", "approve", "true"]);
    assert_eq!(output.status.code(), Some(3), "{}", text(&output.stderr));
    let output = flow(&["signal", db, "waiting", "approve", "{by: ann}"]);
    assert_eq!(output.status.code(), Some(5), "{}", text(&output.stderr));
    assert_eq!(owner.signals("waiting", 0).await.expect("reads").len(), 1);

    // `runs` and `show` read it as a client too, and see the signal; `resume` needs the
    // store's lock.
    let output = flow(&["runs", db]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(text(&output.stdout).contains("waiting"));
    let output = flow(&["show", db, "waiting", "--json"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(text(&output.stdout).contains(r#""by":"ann""#));
    let output = flow(&["resume", db, "waiting"]);
    assert_eq!(output.status.code(), Some(4), "{}", text(&output.stderr));
    assert!(text(&output.stderr).contains("is locked by"));
    // Reading froze nothing of the owner's: its lease still holds.
    let runs = owner.list_runs(&Default::default()).await.expect("lists");
    assert!(runs[0].owner.is_some(), "{runs:?}");
}
