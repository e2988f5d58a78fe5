//! The wake time of a run (when a worker should look at it again) follows its timers and the
//! unconsumed signals a step of it waits for, and a commit that changes none of them (most
//! commits: events and outputs only) leaves it as it was.

mod common;

use std::time::Duration;

use flowdag_sqlite::SqliteStore;
use flowdag_store::{
    Batch, Created, Lease, NewRun, NewSignal, Owner, RunFilter, SignalMode, SignalSent, Store,
    StoredEvent, TimerChange, TimerKey, TimerKind, WaitChange,
};

const LEASE: Duration = Duration::from_secs(600);

async fn wake_at(store: &SqliteStore) -> Option<u64> {
    let runs = store.list_runs(&RunFilter::default()).await.expect("lists");
    runs[0].wake_at_ms
}

fn delay(node: u32) -> TimerKey {
    TimerKey {
        node: Some(node),
        instance: String::new(),
        kind: TimerKind::Delay,
    }
}

/// A batch of one event at `seq`, with `edit` applied.
fn batch(lease: &Lease, seq: u64, edit: impl FnOnce(&mut Batch)) -> Batch {
    let mut batch = Batch::new(lease, seq, LEASE);
    batch.events = vec![StoredEvent::new(seq, "Requested")];
    edit(&mut batch);
    batch
}

#[tokio::test]
async fn the_wake_time_follows_timers_and_signals_across_commits_that_touch_neither() {
    let dir = common::dir("wake");
    let store = SqliteStore::open(dir.join("runs.db")).expect("a store");
    let lease = match store
        .create_run(NewRun::new("w-1", "W", 1, Owner::new("me"), LEASE))
        .await
        .expect("creates")
    {
        Created::New { lease, .. } => lease,
        Created::Exists(_) => panic!("a fresh store"),
    };
    assert_eq!(wake_at(&store).await, None, "a new run without timers");

    let before = now_ms();
    let set = batch(&lease, 0, |b| {
        b.timers = vec![TimerChange::Set {
            key: delay(3),
            after: Duration::from_secs(3600),
        }]
    });
    store.commit(set).await.expect("commits");
    let due = wake_at(&store).await.expect("a timer makes the run due");
    assert!(due >= before + 3_600_000, "{due} is the timer's due time");

    // Events and outputs only: the wake time stays.
    store
        .commit(batch(&lease, 1, |_| {}))
        .await
        .expect("commits");
    assert_eq!(wake_at(&store).await, Some(due), "an events-only commit");

    // A step starts waiting for `approve`: nothing has arrived, the timer is still the time.
    let wait = batch(&lease, 2, |b| {
        b.waits = vec![WaitChange::Open {
            node: 1,
            instance: String::new(),
            name: "approve".into(),
        }]
    });
    store.commit(wait).await.expect("commits");
    assert_eq!(wake_at(&store).await, Some(due), "a wait without a signal");

    // A signal arrives: the run is due at once; an events-only commit keeps that.
    let sent = store
        .send_signal(NewSignal {
            run: "w-1".into(),
            name: "approve".into(),
            payload: b"true".to_vec(),
            mode: SignalMode::Kept,
        })
        .await
        .expect("sends");
    let SignalSent::Stored { id } = sent else {
        panic!("a kept signal is stored: {sent:?}");
    };
    let signalled = wake_at(&store).await.expect("due");
    assert!(signalled < due, "the signal's arrival comes first");
    store
        .commit(batch(&lease, 3, |_| {}))
        .await
        .expect("commits");
    assert_eq!(wake_at(&store).await, Some(signalled));

    // Consuming it and clearing the timer: nothing left to wake for.
    let take = batch(&lease, 4, |b| {
        b.consumed = vec![id];
        b.waits = vec![WaitChange::Close {
            node: 1,
            instance: String::new(),
        }];
    });
    store.commit(take).await.expect("commits");
    assert_eq!(wake_at(&store).await, Some(due), "the timer is left");
    let clear = batch(&lease, 5, |b| {
        b.timers = vec![TimerChange::Clear { key: delay(3) }]
    });
    store.commit(clear).await.expect("commits");
    assert_eq!(wake_at(&store).await, None, "no timer, no open signal");

    // A kept signal for a step that does not wait yet makes nothing due; the commit that opens
    // its step's wait (and changes nothing else) does.
    let sent = store
        .send_signal(NewSignal {
            run: "w-1".into(),
            name: "later".into(),
            payload: b"1".to_vec(),
            mode: SignalMode::Kept,
        })
        .await
        .expect("sends");
    assert!(matches!(sent, SignalSent::Stored { .. }), "{sent:?}");
    assert_eq!(wake_at(&store).await, None, "nobody waits for `later`");
    let wait = batch(&lease, 6, |b| {
        b.waits = vec![WaitChange::Open {
            node: 2,
            instance: String::new(),
            name: "later".into(),
        }]
    });
    store.commit(wait).await.expect("commits");
    assert!(
        wake_at(&store).await.is_some(),
        "a wait opened for a stored signal makes the run due"
    );
}

/// Milliseconds since the Unix epoch by this process's clock: the store's clock.
fn now_ms() -> u64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    u64::try_from(since.expect("after 1970").as_millis()).expect("fits")
}
