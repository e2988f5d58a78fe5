//! The web view in a real browser: headless Chromium, driven over its DevTools pipe
//! (`support/cdp.rs`), opens the list and a run of a store made by real durable runs, checks
//! the page by its DOM (rows, status colours, steps, timeline), sends a signal from the run's
//! form and sees the run finish without a reload, and saves screenshots under
//! `target/view/` (with `FLOW_SCREENSHOTS=DIR`, also in DIR as `view-*.png`: the docs' pictures).
//!
//! Chromium is `FLOW_CHROMIUM`, else `chromium` on the PATH (`bash .ci/chromium` installs
//! the distribution's package and prints the variable). Without one the test says so and
//! passes, unless `FLOW_REQUIRE_BROWSER` is set (as `.ci/run` sets it): then it fails.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use flowdag::prelude::*;
use flowdag_cli::web::View;
use flowdag_runtime::worker::Worker;
use flowdag_sqlite::SqliteStore;

mod common;
mod support {
    pub mod cdp;
}
use common::Never;
use support::cdp::{Browser, chromium};

#[derive(Debug)]
struct Declined(String);

impl std::fmt::Display for Declined {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Declined {}

async fn quote(order: u64) -> Result<u64, Never> {
    Ok(order * 100)
}

async fn reserve(order: u64) -> Result<u64, Never> {
    Ok(order)
}

async fn release(_stock: &u64) -> Result<(), Never> {
    Ok(())
}

/// Fails on its first attempt, for a retry in the picture; order 13 fails for good.
async fn charge(order: u64, price: &u64) -> Result<u64, Declined> {
    let attempt = flowdag_runtime::durable::attempt().map_or(1, |a| a.attempt());
    match (order, attempt) {
        (13, _) => Err(Declined(format!("card declined for <b>order {order}</b>"))),
        (_, 1) => Err(Declined("the bank timed out".to_owned())),
        _ => Ok(*price),
    }
}

async fn ship(order: u64, approved: &bool) -> Result<String, Declined> {
    match approved {
        true => Ok(format!("order {order} shipped")),
        false => Err(Declined(format!("order {order} was not approved"))),
    }
}

workflow! {
    /// Quotes and reserves an order at once, charges it, waits for a person's approval, ships.
    #[flow(durable)]
    Approval(order: u64) -> String {
        Sequential {
            Parallel {
                price = Operation(quote(order)),
                stock = Operation(reserve(order), compensate = release(&stock)),
            },
            paid = Operation(charge(order, &price), retries = 2, backoff = "5ms"),
            approved = Signal(approve: bool),
            shipped = Operation(ship(order, &approved)),
        }
        => shipped.clone()
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

/// The store's runs: `order-7` waits for its approval; `order-13` failed at its charge (its
/// stock released); `order-<script>` has a hostile id.
fn make_store(dir: &Path) -> PathBuf {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).expect("a directory");
    let path = dir.join("runs.db");
    let store = SqliteStore::open(&path).expect("opens");
    runtime().block_on(async {
        for (id, order) in [
            ("order-7", 7),
            ("order-13", 13),
            ("order-<script>window.__pwned=1</script>", 3),
        ] {
            let outcome = Approval::runner()
                .durable(&store, id)
                .unload_when_waiting(Duration::ZERO)
                .execute(order)
                .await
                .expect("the store works");
            assert_eq!(outcome.is_unloaded(), order != 13, "{id}");
        }
    });
    path
}

/// A worker owning the store, and the view with actions, on a thread of their own.
fn serve(path: PathBuf) -> SocketAddr {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        runtime().block_on(async move {
            let owner = SqliteStore::open(&path).expect("owns the store");
            let client = SqliteStore::open_client(&path).expect("a client");
            let view = View::new(client)
                .name("runs.db")
                .register::<Approval>()
                .allow_actions(true);
            let serving = view
                .serve("127.0.0.1:0".parse().expect("an address"))
                .await
                .expect("serves");
            tx.send(serving.addr()).expect("sent");
            let worker = Worker::new(owner)
                .register::<Approval>()
                .poll_interval(Duration::from_millis(20));
            let _ = worker.run(std::future::pending::<()>()).await;
        });
    });
    rx.recv_timeout(Duration::from_secs(30))
        .expect("the view starts")
}

/// The value of `js` in the page, as a string.
fn text(browser: &mut Browser, js: &str) -> String {
    match browser.eval(js) {
        Ok(serde_json::Value::String(s)) => s,
        Ok(other) => other.to_string(),
        Err(why) => panic!("`{js}` failed: {why}"),
    }
}

fn shot(browser: &mut Browser, name: &str) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/view");
    std::fs::create_dir_all(&dir).expect("a directory");
    let file = dir.join(format!("{name}.png"));
    browser.screenshot(&file).expect("a screenshot");
    let png = std::fs::read(&file).expect("the screenshot");
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "{name} is a PNG");
    if let Ok(docs) = std::env::var("FLOW_SCREENSHOTS") {
        let docs = PathBuf::from(docs);
        std::fs::create_dir_all(&docs).expect("a directory");
        std::fs::copy(&file, docs.join(format!("view-{name}.png"))).expect("copied");
    }
}

#[test]
fn a_person_watches_a_run_and_approves_it_from_the_page() {
    let Some(path) = chromium() else {
        assert!(
            std::env::var_os("FLOW_REQUIRE_BROWSER").is_none(),
            "FLOW_REQUIRE_BROWSER is set and there is no Chromium: run `eval \"$(bash .ci/chromium)\"`"
        );
        eprintln!(
            "no Chromium (FLOW_CHROMIUM, or `chromium` on the PATH): the browser test is skipped"
        );
        return;
    };
    let store = make_store(&Path::new(env!("CARGO_TARGET_TMPDIR")).join("browser"));
    let addr = serve(store);
    let mut browser = Browser::launch(&path).expect("Chromium starts");
    let wait = Duration::from_secs(30);

    // The list: a row per run, each with its status.
    browser
        .goto(&format!("http://{addr}/runs"))
        .expect("the list");
    assert_eq!(
        text(
            &mut browser,
            "String(document.querySelectorAll('#runs tr[data-run]').length)"
        ),
        "3"
    );
    assert_eq!(
        text(
            &mut browser,
            "document.querySelector('tr[data-run=\"order-13\"]').dataset.status"
        ),
        "failed"
    );
    assert_eq!(
        text(
            &mut browser,
            "getComputedStyle(document.querySelector('tr[data-run=\"order-13\"] .status')).backgroundColor"
        ),
        "rgb(244, 166, 166)",
        "a failed run is red"
    );
    shot(&mut browser, "runs");

    // A failed run: its failed step and its compensation, in their colours.
    browser
        .goto(&format!("http://{addr}/runs/order-13"))
        .expect("a run");
    assert_eq!(
        text(
            &mut browser,
            "document.querySelector('#graph g[data-node=\"paid\"]').dataset.status"
        ),
        "failed"
    );
    assert_eq!(
        text(
            &mut browser,
            "document.querySelector('#graph g[data-node=\"paid\"] rect').getAttribute('fill')"
        ),
        "#f4a6a6"
    );
    assert!(
        text(
            &mut browser,
            "document.querySelector('#run-error').textContent"
        )
        .contains("card declined for <b>order 13</b>")
    );
    assert_eq!(
        text(
            &mut browser,
            "String(document.querySelectorAll('#run-error b').length)"
        ),
        "0",
        "the error is text"
    );
    assert!(
        text(
            &mut browser,
            "document.querySelector('#compensations').textContent"
        )
        .contains("stock")
    );
    assert!(
        text(
            &mut browser,
            "document.querySelector('form.redrive') ? 'yes' : 'no'"
        ) == "yes"
    );
    shot(&mut browser, "run-failed");

    // The waiting run: its graph, steps, timeline and the typed form of its signal.
    browser
        .goto(&format!("http://{addr}/runs/order-7"))
        .expect("a run");
    assert_eq!(
        text(
            &mut browser,
            "document.querySelector('#status').textContent"
        ),
        "waiting"
    );
    assert_eq!(
        text(
            &mut browser,
            "document.querySelector('#graph g[data-node=\"approved\"]').dataset.status"
        ),
        "waiting"
    );
    assert_eq!(
        text(
            &mut browser,
            "document.querySelector('#graph g[data-node=\"price\"] rect').getAttribute('fill')"
        ),
        "#b7e4c7",
        "a completed step is green"
    );
    assert_eq!(
        text(
            &mut browser,
            "document.querySelector('tr[data-step=\"paid\"] td:nth-child(3)').textContent"
        ),
        "2",
        "paid took two attempts"
    );
    let bars: u32 = text(
        &mut browser,
        "String(document.querySelectorAll('#timeline rect.span').length)",
    )
    .parse()
    .expect("a count");
    assert!(bars >= 5, "a bar per attempt: {bars}");
    assert_eq!(
        text(
            &mut browser,
            "document.querySelector('#waiting').textContent"
        ),
        "Waiting: approved"
    );
    assert_eq!(
        text(
            &mut browser,
            "document.querySelector('form.signal input[type=checkbox]').name"
        ),
        "value"
    );
    shot(&mut browser, "run-waiting");

    // Approve from the page; the run goes on, and the page follows it without a reload.
    browser
        .click("form.signal input[type=checkbox]")
        .expect("the checkbox");
    browser
        .click("form.signal button[type=submit]")
        .expect("the button");
    browser
        .wait_for("document.querySelector('#notice') !== null", wait)
        .expect("back on the run's page with a notice");
    assert!(
        text(
            &mut browser,
            "document.querySelector('#notice').textContent"
        )
        .starts_with("signal `approve` stored")
    );
    browser.eval("window.__same_page = true").expect("a mark");
    browser
        .wait_for(
            "document.querySelector('#status').textContent === 'succeeded'",
            wait,
        )
        .expect("the run finishes and the page shows it");
    assert_eq!(
        text(&mut browser, "String(window.__same_page)"),
        "true",
        "no reload"
    );
    assert_eq!(
        text(
            &mut browser,
            "document.querySelector('#graph g[data-node=\"shipped\"]').dataset.status"
        ),
        "completed"
    );
    assert!(
        text(
            &mut browser,
            "document.querySelector('tr[data-step=\"shipped\"]').textContent"
        )
        .contains("order 7 shipped")
    );
    browser
        .wait_for("document.querySelector('form.signal') === null", wait)
        .expect("the forms of a finished run are put away");
    assert!(
        text(
            &mut browser,
            "document.querySelector('#actions').textContent"
        )
        .contains("The run has ended")
    );
    shot(&mut browser, "run-done");

    // The workflow's graph.
    browser
        .goto(&format!("http://{addr}/workflows/Approval"))
        .expect("the workflow");
    assert_eq!(
        text(
            &mut browser,
            "String(document.querySelectorAll('#graph g.node').length)"
        ),
        "5"
    );
    shot(&mut browser, "workflow");

    // A hostile id is text: its script never runs.
    browser
        .goto(&format!(
            "http://{addr}/runs/order-%3Cscript%3Ewindow.__pwned%3D1%3C%2Fscript%3E"
        ))
        .expect("the hostile run");
    assert!(text(&mut browser, "document.querySelector('h1').textContent").contains("<script>"));
    browser
        .goto(&format!("http://{addr}/runs"))
        .expect("the list");
    assert_eq!(text(&mut browser, "typeof window.__pwned"), "undefined");
    let logs = browser.logs();
    assert!(
        !logs.iter().any(|l| l.contains("Content Security Policy")),
        "the view breaks none of its own policy: {logs:?}"
    );
}
