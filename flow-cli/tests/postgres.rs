//! The `flow` binary on a PostgreSQL store (the test server, a fresh schema): `runs` and `show`
//! read it (`show --follow` while a worker commits), `signal` refuses an ended run, and a
//! server that cannot be reached is exit code 4.

use std::process::{Command, Output};

use flowdag_postgres::{PostgresOptions, PostgresStore, testing};
use serde_json::Value;

mod common;
use common::{Failing, Order, Shared, wait_until};

fn flow(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_flow"))
        .args(args)
        .output()
        .expect("the binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn runs_and_show_read_a_postgres_store() {
    let url = testing::server();
    let schema = testing::fresh_schema("cli");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let options = PostgresOptions {
            schema: schema.clone(),
            ..PostgresOptions::default()
        };
        let store = PostgresStore::connect_with(&url, options).expect("a store");
        for (id, order) in [("first", 1), ("second", 2)] {
            let done = Order::runner()
                .durable(&store, id)
                .execute(order)
                .await
                .expect("runs");
            assert_eq!(
                done.result.expect("succeeds"),
                format!("shipped item-{order}")
            );
        }
    });

    let output = flow(&["runs", &url, "--schema", &schema]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let stdout = text(&output.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{stdout}");
    assert!(
        lines[1].starts_with("first ") && lines[1].contains("succeeded"),
        "{stdout}"
    );
    assert!(
        lines[2].starts_with("second ") && lines[2].contains("Order"),
        "{stdout}"
    );

    let output = flow(&["runs", &url, "--schema", &schema, "--json", "--limit", "1"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let runs: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(runs.as_array().map(Vec::len), Some(1));
    assert_eq!(runs[0]["id"], "first");

    let output = flow(&["show", &url, "second", "--schema", &schema]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let stdout = text(&output.stdout);
    assert!(stdout.contains("status    succeeded"), "{stdout}");
    for kind in ["RunStarted", "Requested", "Completed", "RunFinished"] {
        assert!(stdout.contains(kind), "{kind} in {stdout}");
    }
    assert!(stdout.contains("\ninput     2\n"), "{stdout}");
    let output = flow(&["show", &url, "second", "--schema", &schema, "--json"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let shown: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(shown["input"], 2);
    assert_eq!(shown["steps"][0]["output"], "item-2");
    assert_eq!(shown["steps"][1]["output"], "shipped item-2");

    let output = flow(&[
        "signal", &url, "first", "approve", "true", "--schema", &schema,
    ]);
    assert_eq!(output.status.code(), Some(5), "{}", text(&output.stderr));
    assert!(text(&output.stderr).contains("run `first` has ended (succeeded)"));
    let output = flow(&["show", &url, "nope", "--schema", &schema]);
    assert_eq!(output.status.code(), Some(3), "{}", text(&output.stderr));

    // The password comes from a file or the environment, never the command line (the test
    // server trusts local connections: these show that the commands take them).
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli-password");
    std::fs::create_dir_all(&dir).expect("a directory");
    let file = dir.join("password");
    std::fs::write(&file, "s3cret\n").expect("writes");
    let file = file.to_str().expect("utf-8");
    let output = flow(&["runs", &url, "--schema", &schema, "--password-file", file]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let output = Command::new(env!("CARGO_BIN_EXE_flow"))
        .args(["runs", &url, "--schema", &schema])
        .env("PGPASSWORD", "s3cret")
        .output()
        .expect("the binary runs");
    assert!(output.status.success(), "{}", text(&output.stderr));
    let missing = dir.join("missing");
    let missing = missing.to_str().expect("utf-8");
    let output = flow(&[
        "runs",
        &url,
        "--schema",
        &schema,
        "--password-file",
        missing,
    ]);
    assert_eq!(output.status.code(), Some(2), "{}", text(&output.stderr));
    assert!(
        text(&output.stderr).contains("the password file"),
        "{}",
        text(&output.stderr)
    );

    runtime.block_on(testing::drop_schemas("cli"));
}

#[test]
fn resume_runs_a_stopped_run_of_a_postgres_store() {
    let url = testing::server();
    let schema = testing::fresh_schema("cli_resume");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let options = PostgresOptions {
            schema: schema.clone(),
            ..PostgresOptions::default()
        };
        let store = PostgresStore::connect_with(&url, options).expect("a store");
        let failing = Failing::new(store, 1);
        let stopped = Order::runner()
            .durable(&failing, "stopped")
            .execute(3)
            .await;
        assert!(stopped.is_err(), "the run stops at its failed commit");
        // The process that ran it is gone: its lease expires.
        let client = testing::client().await;
        client
            .batch_execute(&format!(
                "UPDATE \"{schema}\".runs SET lease_until = 0 WHERE id = 'stopped'"
            ))
            .await
            .expect("the lease expires");
    });
    let cli = flowdag_cli::Cli::new().register::<Order>();
    let mut out = Vec::new();
    cli.run_with(
        ["flow", "resume", &url, "stopped", "--schema", &schema],
        &mut out,
    )
    .expect("resumes");
    assert_eq!(text(&out), "run `stopped` resumed: succeeded\n");
    let output = flow(&["runs", &url, "--schema", &schema, "--json"]);
    let runs: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(runs[0]["status"], "succeeded");
    runtime.block_on(testing::drop_schemas("cli_resume"));
}

#[test]
fn a_server_that_cannot_be_reached_is_exit_code_4() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let url = format!("postgres://flow:s3cret@127.0.0.1:{port}/flow");
    let output = flow(&["runs", &url]);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(4), "{stderr}");
    assert!(
        stderr.contains(&format!("127.0.0.1:{port}/flow")) && stderr.contains("cannot be reached"),
        "{stderr}"
    );
    assert!(!stderr.contains("s3cret"), "{stderr}");
}

/// `show --follow` prints the events another store (a worker) commits, and returns once the
/// run has ended.
#[test]
fn show_follows_a_run_of_a_postgres_store_to_its_end() {
    use flowdag_runtime::store::{Batch, NewRun, Owner, RunEnd, RunStatus, Store, StoredEvent};
    let url = testing::server();
    let schema = testing::fresh_schema("cli_follow");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let options = PostgresOptions {
        schema: schema.clone(),
        ..PostgresOptions::default()
    };
    let store = PostgresStore::connect_with(&url, options).expect("a store");
    let lease = std::time::Duration::from_secs(3600);
    let event = |seq: u64, kind: &str| {
        let mut event = StoredEvent::new(seq, kind);
        event.node = Some(0);
        event.node_name = Some("fetch".to_owned());
        event.attempt = 1;
        event
    };
    let mut run = NewRun::new("followed", "Order", 1, Owner::new("worker"), lease);
    run.events = vec![StoredEvent::new(0, "RunStarted"), event(1, "Requested")];
    let created = runtime.block_on(store.create_run(run)).expect("creates");
    let held = created.lease().expect("a new run").clone();

    let out = Shared::default();
    let follower = {
        let (mut out, url, schema) = (out.clone(), url.clone(), schema.clone());
        std::thread::spawn(move || {
            let args = [
                "flow",
                "show",
                &url,
                "followed",
                "--schema",
                &schema,
                "--follow",
                "--interval",
                "5",
            ];
            flowdag_cli::Cli::new().run_with(args, &mut out)
        })
    };
    wait_until("the run is shown", 3_000, || {
        out.text().contains("Requested")
    });
    let mut last = Batch::new(&held, 2, lease);
    last.events = vec![event(2, "Completed"), StoredEvent::new(3, "RunFinished")];
    last.status = Some(RunStatus::Succeeded);
    last.end = Some(RunEnd {
        result: None,
        error: None,
    });
    runtime.block_on(store.commit(last)).expect("commits");
    wait_until("the command returns", 3_000, || follower.is_finished());
    follower
        .join()
        .expect("no panic")
        .expect("follows to the end");
    let text = out.text();
    let completed: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("2 ") || l.starts_with("3 "))
        .collect();
    assert_eq!(completed.len(), 2, "each new event once: {text}");
    assert!(completed[0].contains("Completed"), "{text}");
    assert!(
        text.ends_with("\nrun `followed` ended: succeeded\n"),
        "{text}"
    );
    runtime.block_on(testing::drop_schemas("cli_follow"));
}
