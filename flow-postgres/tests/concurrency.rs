//! Concurrent writers on one run: of the committers racing for a sequence number exactly one
//! wins, the others are refused and write nothing; a former owner racing the new one loses.

use std::sync::Arc;
use std::time::Duration;

use flowdag_postgres::testing;
use flowdag_store::{Batch, Committed, Created, NewRun, Owner, Store, StoreError, StoredEvent};

const LEASE: Duration = Duration::from_secs(60);

fn event(seq: u64, kind: &str, node: u32) -> StoredEvent {
    let mut event = StoredEvent::new(seq, kind);
    event.node = Some(node);
    event.attempt = 1;
    event
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_committers_racing_for_a_sequence_number_one_wins() {
    let store: Arc<dyn Store> = Arc::new(testing::store("race"));
    let owner = Owner::new("a");
    let Created::New { lease, .. } = store
        .create_run(NewRun::new("r", "W", 1, owner.clone(), LEASE))
        .await
        .expect("creates")
    else {
        panic!("a new run")
    };
    let mut winners = Vec::new();
    for seq in 0..10u64 {
        let mut racers = Vec::new();
        for node in 0..8u32 {
            let store = Arc::clone(&store);
            let mut batch = Batch::new(&lease, seq, LEASE);
            batch.events = vec![event(seq, "Requested", node)];
            racers.push(tokio::spawn(
                async move { (node, store.commit(batch).await) },
            ));
        }
        let mut won = Vec::new();
        for racer in racers {
            let (node, answer) = racer.await.expect("a racer");
            match answer {
                Ok(Committed::Applied { next_seq }) => {
                    assert_eq!(next_seq, seq + 1);
                    won.push(node);
                }
                Err(StoreError::Conflict { expected, .. }) => assert_eq!(expected, seq + 1),
                other => panic!("seq {seq}: a loser is a Conflict, got {other:?}"),
            }
        }
        assert_eq!(won.len(), 1, "seq {seq}: exactly one winner: {won:?}");
        winners.push(won[0]);
    }
    let journal = store.events("r", 0).await.expect("the journal");
    assert_eq!(
        journal
            .iter()
            .map(|e| e.node.unwrap_or(99))
            .collect::<Vec<_>>(),
        winners,
        "the journal holds the winners' events, each once"
    );
    testing::drop_schemas("race").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_former_owner_racing_the_new_one_loses() {
    let store: Arc<dyn Store> = Arc::new(testing::store("takeover"));
    let a = Owner::new("a");
    let b = Owner::new("b");
    for round in 0..5 {
        let id = format!("r{round}");
        let Created::New { lease: old, .. } = store
            .create_run(NewRun::new(
                &*id,
                "W",
                1,
                a.clone(),
                Duration::from_millis(1),
            ))
            .await
            .expect("creates")
        else {
            panic!("a new run")
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        let new = store
            .load_run(&id, &b, LEASE)
            .await
            .expect("takes over")
            .lease;
        let mut stale = Batch::new(&old, 0, LEASE);
        stale.events = vec![event(0, "Requested", 0)];
        let mut fresh = Batch::new(&new, 0, LEASE);
        fresh.events = vec![event(0, "Requested", 1)];
        let (s1, s2) = (Arc::clone(&store), Arc::clone(&store));
        let stale = tokio::spawn(async move { s1.commit(stale).await });
        let fresh = tokio::spawn(async move { s2.commit(fresh).await });
        let (stale, fresh) = (stale.await.expect("a"), fresh.await.expect("b"));
        assert_eq!(
            fresh,
            Ok(Committed::Applied { next_seq: 1 }),
            "round {round}"
        );
        assert!(
            matches!(
                stale,
                Err(StoreError::LeaseLost { .. } | StoreError::Conflict { .. })
            ),
            "round {round}: the former owner's commit is refused: {stale:?}"
        );
        let journal = store.events(&id, 0).await.expect("the journal");
        assert_eq!(journal.len(), 1);
        assert_eq!(journal[0].node, Some(1), "the new owner's event");
    }
    testing::drop_schemas("takeover").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_chosen_as_a_deadlock_victim_is_run_again() {
    let schema = testing::fresh_schema("deadlock");
    let options = flowdag_postgres::PostgresOptions {
        schema: schema.clone(),
        ..flowdag_postgres::PostgresOptions::default()
    };
    let store = Arc::new(
        flowdag_postgres::PostgresStore::connect_with(&testing::server(), options)
            .expect("a store"),
    );
    let a = Owner::new("a");
    let mut held = Vec::new();
    for id in ["r1", "r2"] {
        let Created::New { lease, .. } = store
            .create_run(NewRun::new(id, "W", 1, a.clone(), LEASE))
            .await
            .expect("creates")
        else {
            panic!("a new run")
        };
        held.push(lease);
    }
    // Another session takes r2, then (below) r1; the store's heartbeat takes r1, then r2. It
    // waits first, so its backend finds the deadlock (the other session waits 10 s before it
    // looks) and PostgreSQL aborts the heartbeat's transaction: the store runs it again.
    let mut other = testing::client().await;
    other
        .batch_execute("SET deadlock_timeout = '10s'")
        .await
        .expect("the test server lets a session set deadlock_timeout");
    let blocker = other.transaction().await.expect("a transaction");
    blocker
        .execute(
            &format!("UPDATE \"{schema}\".runs SET updated_ms = updated_ms WHERE id = 'r2'"),
            &[],
        )
        .await
        .expect("takes r2");
    let beating = {
        let store = Arc::clone(&store);
        let (a, held) = (a.clone(), held.clone());
        tokio::spawn(async move { store.heartbeat(&a, &held, LEASE).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    blocker
        .execute(
            &format!("UPDATE \"{schema}\".runs SET updated_ms = updated_ms WHERE id = 'r1'"),
            &[],
        )
        .await
        .expect("the other session is not the victim");
    blocker.commit().await.expect("commits");
    assert_eq!(
        beating.await.expect("the heartbeat"),
        Ok(vec![]),
        "the heartbeat went through on its second try"
    );
    testing::drop_schemas("deadlock").await;
}
