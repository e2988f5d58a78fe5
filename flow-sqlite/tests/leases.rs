//! Opening a store frees the leases its file holds: the file lock proves that whoever took
//! them has closed or died, so a restarted process resumes its runs at once.

use std::time::Duration;

use flowdag_sqlite::SqliteStore;
use flowdag_store::{NewRun, Owner, Store, StoreError};

#[tokio::test]
async fn reopening_frees_the_leases_of_the_previous_process() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("leases");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a directory");
    let path = dir.join("runs.db");
    let lease = Duration::from_secs(3600);
    {
        let store = SqliteStore::open(&path).expect("opens");
        let first = Owner::new("first");
        store
            .create_run(NewRun::new("r-1", "W", 1, first, lease))
            .await
            .expect("creates");
        // While the store lives, the lease holds.
        let err = store
            .load_run("r-1", &Owner::new("second"), lease)
            .await
            .expect_err("held");
        assert!(matches!(err, StoreError::Busy { .. }), "{err}");
    }
    let store = SqliteStore::open(&path).expect("reopens");
    let run = &store.list_runs(&Default::default()).await.expect("lists")[0];
    assert_eq!((run.owner.as_deref(), run.lease_until_ms), (None, None));
    let loaded = store
        .load_run("r-1", &Owner::new("second"), lease)
        .await
        .expect("the lease of the closed store is free");
    assert_eq!(loaded.lease.owner, Owner::new("second"));
}
