//! The web view (`flowdag_cli::web::View`) over real SQLite stores, through HTTP: values from
//! the store are text on every page, bad requests get 400 with a message, a read-only view
//! writes nothing, actions need the flag, this process's token and the same origin, and the
//! list of runs pages by its cursor.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use flowdag::prelude::*;
use flowdag_cli::web::View;
use flowdag_runtime::store::{NewSignal, RunFilter, SignalMode, Store};
use flowdag_sqlite::SqliteStore;
use serde_json::Value;

mod common;
mod support {
    pub mod http;
}
use common::{Never, Order, fetch};
use support::http::{enc, get, post, request};

/// Script and markup, as a run id, an input, an output, an error and a signal would carry them.
const HOSTILE: &str =
    r#"</code><img src=x onerror="window.__pwned=1"><script>window.__pwned=1</script>'&"#;

#[derive(Debug)]
struct Exploded(String);

impl std::fmt::Display for Exploded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "exploded: {}", self.0)
    }
}

impl std::error::Error for Exploded {}

async fn echo(text: &str) -> Result<String, Never> {
    Ok(text.to_owned())
}

async fn explode(text: &str) -> Result<(), Exploded> {
    Err(Exploded(text.to_owned()))
}

workflow! {
    /// Echoes its text, then fails with it.
    #[flow(durable)]
    Hostile(text: String) -> () {
        Sequential {
            echoed = Operation(echo(&text)),
            Operation(explode(&echoed)),
        }
        => ()
    }
}

workflow! {
    /// Waits for a confirmation.
    #[flow(durable)]
    Confirming(order: u64) -> bool {
        Sequential {
            Operation(fetch(order)),
            confirmed = Signal(confirm: bool),
        }
        => confirmed
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

/// A fresh store file for test `name`, filled by `fill`; closed when this returns.
/// Runs `Order` in `store` as the run `id`, to its success.
async fn ordered(store: &SqliteStore, id: impl Into<String>, order: u64) {
    let outcome = Order::runner()
        .durable(store, id)
        .execute(order)
        .await
        .expect("runs");
    assert!(outcome.result.is_ok(), "{:?}", outcome.result);
}

fn fresh_store<F: std::future::Future<Output = ()>>(
    name: &str,
    fill: impl FnOnce(SqliteStore) -> F,
) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("web-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a directory");
    let path = dir.join("runs.db");
    let store = SqliteStore::open(&path).expect("opens");
    runtime().block_on(fill(store));
    path
}

/// Serves `view` on a thread of its own for the rest of the test binary; its address.
fn serve(view: View) -> SocketAddr {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        runtime().block_on(async move {
            let addr: SocketAddr = "127.0.0.1:0".parse().expect("an address");
            let serving = view.serve(addr).await.expect("serves");
            tx.send(serving.addr()).expect("sent");
            std::future::pending::<()>().await;
        });
    });
    rx.recv_timeout(Duration::from_secs(30))
        .expect("the view starts")
}

/// Asserts `body` holds no markup of [`HOSTILE`], only its escaped text.
fn harmless(page: &str, body: &str) {
    for raw in ["<script>window", "<img src=x", "onerror=\"window"] {
        assert!(
            !body.contains(raw),
            "{page} writes `{raw}` as markup:\n{body}"
        );
    }
}

#[test]
fn values_from_the_store_are_text_on_every_page() {
    let id = format!("run-{HOSTILE}");
    let path = fresh_store("hostile", |store| {
        let id = id.clone();
        async move {
            let outcome = Hostile::runner()
                .durable(&store, &id)
                .execute(HOSTILE.to_owned())
                .await
                .expect("the store works");
            assert!(outcome.result.is_err(), "the run fails");
            // A signal of a hostile name and payload, for a run that waits.
            let waiting = Confirming::runner()
                .durable(&store, format!("wait-{HOSTILE}"))
                .unload_when_waiting(Duration::ZERO)
                .execute(1)
                .await
                .expect("runs");
            assert!(waiting.is_unloaded());
            store
                .send_signal(NewSignal {
                    run: format!("wait-{HOSTILE}"),
                    name: HOSTILE.to_owned(),
                    payload: serde_json::to_vec(HOSTILE).expect("JSON"),
                    mode: SignalMode::Kept,
                })
                .await
                .expect("stored");
        }
    });
    let store = SqliteStore::open_client(&path).expect("opens");
    let addr = serve(View::new(store).register::<Hostile>().allow_actions(true));
    let link = enc(&id);
    let pages = [
        format!("/runs/{}", enc(&format!("wait-{HOSTILE}"))),
        "/runs".to_owned(),
        format!("/runs?id={}", enc("<script>")),
        format!("/runs/{link}"),
        format!("/runs/{link}/live?since=0"),
        "/workflows/Hostile".to_owned(),
        format!("/workflows/{}", enc(HOSTILE)),
        format!("/runs/{}", enc(&format!("{HOSTILE}-missing"))),
    ];
    for page in &pages {
        let answer = get(addr, page);
        harmless(page, &answer.body);
        assert!(
            answer.headers["content-security-policy"].contains("script-src 'self'"),
            "{page}"
        );
    }
    let waiting = get(addr, &format!("/runs/{}", enc(&format!("wait-{HOSTILE}"))));
    assert!(
        waiting
            .body
            .contains(r#"<tr data-signal="&lt;/code&gt;&lt;img"#),
        "{}",
        waiting.body
    );
    assert!(
        waiting
            .body
            .contains(r#"action="/runs/wait-%3C%2Fcode%3E%3Cimg"#),
        "the forms' targets are encoded"
    );
    let run = get(addr, &format!("/runs/{link}"));
    assert_eq!(run.status, 200, "{}", run.body);
    // The id, the error and the signal are there, as text.
    assert!(
        run.body
            .contains("&lt;script&gt;window.__pwned=1&lt;/script&gt;&#39;&amp;")
    );
    assert!(
        run.body.contains("exploded: &lt;/code&gt;&lt;img src=x"),
        "{}",
        run.body
    );
    assert!(
        run.body
            .contains(r#"<tr data-step="explode" data-status="failed""#)
            || run.body.contains(r#"data-status="failed""#)
    );
    let list = get(addr, "/runs");
    assert!(
        list.body.contains("run-&lt;/code&gt;&lt;img"),
        "{}",
        list.body
    );
    // Whole values are plain text, never HTML (and never sniffed as HTML).
    for of in ["input", "step%3Aechoed"] {
        let value = get(addr, &format!("/runs/{link}/value?of={of}"));
        assert_eq!(value.status, 200, "{of}: {}", value.body);
        assert_eq!(value.headers["content-type"], "text/plain; charset=utf-8");
        assert_eq!(value.headers["x-content-type-options"], "nosniff");
        assert!(value.body.contains("<script>"), "the value itself, as text");
    }
    let live = get(addr, &format!("/runs/{link}/live?since=0"));
    let live: Value = serde_json::from_str(&live.body).expect("JSON");
    assert_eq!(live["status"], "failed");
    assert_eq!(live["finished"], true);
}

#[test]
fn bad_requests_get_400_and_a_read_only_view_writes_nothing() {
    let path = fresh_store("bad-input", |store| async move {
        ordered(&store, "done", 1).await;
        let waiting = Confirming::runner()
            .durable(&store, "waiting")
            .unload_when_waiting(Duration::ZERO)
            .execute(1)
            .await
            .expect("runs");
        assert!(waiting.is_unloaded());
    });
    let before = std::fs::read(&path).expect("the store's file");
    let store = SqliteStore::open_read_only(&path).expect("opens");
    let addr = serve(View::new(store).register::<Confirming>());
    let long = format!("/runs?id={}", "x".repeat(5000));
    let bad = [
        ("/runs?limit=0", "`limit`"),
        ("/runs?limit=501", "`limit`"),
        ("/runs?limit=many", "`limit`"),
        ("/runs?status=bogus", "not a status"),
        ("/runs?from=yesterday", "`from`"),
        ("/runs?until=2026-13-01", "`until`"),
        ("/runs?after=nocolon", "`after`"),
        ("/runs?before=soon:order-1", "`before`"),
        ("/runs?order=sideways", "`order`"),
        ("/runs?colour=red", "unknown parameter `colour`"),
        ("/runs?workflow=a&workflow=b", "given twice"),
        (long.as_str(), "at most 4096"),
        ("/runs/done/live?since=soon", "`since`"),
        ("/runs/done/value?of=everything", "`of`"),
        ("/runs/done/value", "`of`"),
        ("/runs/done?notice=a&bogus=1", "unknown parameter"),
    ];
    for (path, message) in bad {
        let answer = get(addr, path);
        assert_eq!(answer.status, 400, "{path}: {}", answer.body);
        assert!(answer.body.contains(message), "{path}: {}", answer.body);
    }
    for path in [
        "/runs/nope",
        "/workflows/Nope",
        "/nothing/here",
        "/runs/done/value?of=result&of=input",
    ] {
        let answer = get(addr, path);
        assert!(
            matches!(answer.status, 400 | 404),
            "{path}: {}",
            answer.status
        );
        assert!(
            answer.body.contains("<p>"),
            "a page that says why: {}",
            answer.body
        );
    }
    assert_eq!(get(addr, "/runs/nope").status, 404);
    // A path that is not UTF-8 is refused too.
    assert_eq!(get(addr, "/runs/%FF%FE").status, 400);
    // The pages that work.
    for path in [
        "/",
        "/runs",
        "/runs?status=succeeded,waiting&order=oldest&limit=500",
        "/runs/done",
        "/runs/waiting",
        "/workflows/Order",
        "/workflows/Confirming",
        "/static/view.js",
        "/static/view.css",
    ] {
        let answer = get(addr, path);
        assert!(
            matches!(answer.status, 200 | 303),
            "{path}: {} {}",
            answer.status,
            answer.body
        );
    }
    let waiting = get(addr, "/runs/waiting");
    assert!(
        waiting
            .body
            .contains(r#"data-node="confirmed" data-kind="signal" data-status="waiting""#),
        "{}",
        waiting.body
    );
    assert!(waiting.body.contains("read-only"));
    assert!(
        !waiting.body.contains("<form class=\"signal\""),
        "no forms without actions"
    );
    // No action without the flag: 405, whatever the form says.
    for action in ["signal", "cancel", "redrive"] {
        let answer = post(
            addr,
            &format!("/runs/waiting/{action}"),
            "name=confirm&input=bool&value=true",
            &[],
        );
        assert_eq!(answer.status, 405, "{action}: {}", answer.body);
        assert!(answer.body.contains("--allow-actions"), "{}", answer.body);
    }
    // A huge form is refused before it is read.
    let huge = format!("name=confirm&value={}", "x".repeat(70 * 1024));
    assert_eq!(post(addr, "/runs/waiting/signal", &huge, &[]).status, 405);
    let owner = SqliteStore::open_client(&path).expect("opens");
    let signals = runtime()
        .block_on(owner.signals("waiting", 0))
        .expect("reads");
    assert!(signals.is_empty(), "nothing was sent: {signals:?}");
    drop(owner);
    assert!(
        std::fs::read(&path).expect("the file") == before,
        "the store's file is unchanged"
    );
}

/// The token of the view's forms on a run's page.
fn token(page: &str) -> String {
    let at = page
        .find(r#"name="token" value=""#)
        .expect("a form with a token")
        + 20;
    page[at..].split('"').next().expect("a token").to_owned()
}

#[test]
fn actions_need_the_flag_the_token_and_the_same_origin() {
    let path = fresh_store("actions", |store| async move {
        for id in ["waiting", "cancelled"] {
            let waiting = Confirming::runner()
                .durable(&store, id)
                .unload_when_waiting(Duration::ZERO)
                .execute(1)
                .await
                .expect("runs");
            assert!(waiting.is_unloaded());
        }
        let failed = Hostile::runner()
            .durable(&store, "failed")
            .execute("boom".to_owned())
            .await
            .expect("runs");
        assert!(failed.result.is_err());
    });
    let store = SqliteStore::open_client(&path).expect("opens");
    let addr = serve(
        View::new(store.clone())
            .register::<Confirming>()
            .allow_actions(true),
    );
    let page = get(addr, "/runs/waiting");
    assert!(
        page.body.contains(r#"<form class="signal""#),
        "{}",
        page.body
    );
    assert!(
        page.body
            .contains(r#"<input type="checkbox" name="value" value="true">"#),
        "a checkbox for a bool"
    );
    let token = token(&page.body);
    let signals = || {
        runtime()
            .block_on(store.signals("waiting", 0))
            .expect("reads")
    };

    // Without the token, with another's, from another origin: 403, nothing stored.
    let form = "name=confirm&input=bool&value=true";
    assert_eq!(post(addr, "/runs/waiting/signal", form, &[]).status, 403);
    let forged = format!("token=0000&{form}");
    assert_eq!(post(addr, "/runs/waiting/signal", &forged, &[]).status, 403);
    let good = format!("token={token}&{form}");
    let other = post(
        addr,
        "/runs/waiting/signal",
        &good,
        &[("Origin", "http://evil.example")],
    );
    assert_eq!(other.status, 403, "{}", other.body);
    // A payload of the wrong type, an undeclared signal, an operator's request, an unknown
    // field: 400, nothing stored.
    for bad in [
        format!("token={token}&name=confirm&input=json&value=%22yes%22"),
        format!("token={token}&name=approve&input=bool&value=true"),
        format!("token={token}&name=flow.cancel&input=json&value=null"),
        format!("token={token}&name=confirm&input=json&value=%7Bnot%20json"),
        format!("token={token}&name=confirm&input=bool&value=true&extra=1"),
    ] {
        let answer = post(addr, "/runs/waiting/signal", &bad, &[]);
        assert_eq!(answer.status, 400, "{bad}: {}", answer.body);
    }
    assert!(signals().is_empty());
    // A form over 64 KiB: 413 before it is read.
    let huge = format!(
        "token={token}&name=confirm&input=json&value={}",
        "1".repeat(70 * 1024)
    );
    assert_eq!(post(addr, "/runs/waiting/signal", &huge, &[]).status, 413);
    // A name too long for a signal: 400 before anything is stored.
    let long = format!("token={token}&name={}&input=json&value=1", "n".repeat(300));
    assert_eq!(post(addr, "/runs/waiting/signal", &long, &[]).status, 400);
    // Another site's name for this machine (DNS rebinding): refused, pages and actions alike.
    for (method, path, body) in [
        ("GET", "/runs/waiting", ""),
        ("POST", "/runs/waiting/signal", good.as_str()),
    ] {
        let rebound = request(
            addr,
            method,
            path,
            &[
                ("Host", "evil.example:80"),
                ("Content-Type", "application/x-www-form-urlencoded"),
            ],
            body,
        );
        assert_eq!(rebound.status, 421, "{method} {path}: {}", rebound.body);
    }
    for host in ["localhost", "127.0.0.1", "[::1]:8080", "LOCALHOST:1"] {
        assert_eq!(
            request(addr, "GET", "/runs", &[("Host", host)], "").status,
            200,
            "{host}"
        );
    }
    // The real thing: stored, and the browser is sent back to the run with a notice.
    let origin = format!("http://{addr}");
    let sent = post(addr, "/runs/waiting/signal", &good, &[("Origin", &origin)]);
    assert_eq!(sent.status, 303, "{}", sent.body);
    assert!(
        sent.headers["location"]
            .starts_with("/runs/waiting?notice=signal%20%60confirm%60%20stored"),
        "{:?}",
        sent.headers
    );
    let stored = signals();
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].name, "confirm");
    assert_eq!(stored[0].payload, b"true");
    let back = get(addr, &sent.headers["location"]);
    assert!(
        back.body
            .contains(r#"<p class="notice" id="notice">signal `confirm` stored"#),
        "{}",
        back.body
    );

    // Cancel: requested through `cancel_run`.
    let page = get(addr, "/runs/cancelled");
    let cancel = post(
        addr,
        "/runs/cancelled/cancel",
        &format!("token={}&reason=by+hand", token),
        &[],
    );
    assert!(page.body.contains(r#"<form class="cancel""#));
    assert_eq!(cancel.status, 303, "{}", cancel.body);
    assert!(
        cancel.headers["location"].contains("cancel%20requested"),
        "{:?}",
        cancel.headers
    );
    let requests = runtime()
        .block_on(store.signals("cancelled", 0))
        .expect("reads");
    assert!(
        requests.iter().any(|s| s.name.starts_with("flow.")),
        "{requests:?}"
    );

    // Redrive: only a failed or cancelled run; the failed one is running again.
    let refused = post(
        addr,
        "/runs/waiting/redrive",
        &format!("token={token}"),
        &[],
    );
    assert_eq!(refused.status, 409, "{}", refused.body);
    let failed = get(addr, "/runs/failed");
    assert!(failed.body.contains(r#"<form class="redrive""#));
    let redriven = post(addr, "/runs/failed/redrive", &format!("token={token}"), &[]);
    assert_eq!(redriven.status, 303, "{}", redriven.body);
    let run = runtime()
        .block_on(store.list_runs(&RunFilter {
            id: Some("failed".into()),
            ..RunFilter::default()
        }))
        .expect("reads");
    assert_eq!(run[0].status.as_str(), "running");
}

/// A view told its public name answers to it.
#[test]
fn a_view_answers_to_the_names_it_is_given() {
    let path = fresh_store("hosts", |store| async move {
        ordered(&store, "done", 1).await;
    });
    let named = serve(
        View::new(SqliteStore::open_read_only(&path).expect("opens"))
            .allow_host("flow.example.com"),
    );
    let get_as = |addr, host| request(addr, "GET", "/runs", &[("Host", host)], "").status;
    assert_eq!(get_as(named, "flow.example.com"), 200);
    assert_eq!(get_as(named, "flow.example.com:443"), 200);
    assert_eq!(get_as(named, "other.example.com"), 421);
    let any = serve(View::new(SqliteStore::open_read_only(&path).expect("opens")).allow_any_host());
    assert_eq!(get_as(any, "other.example.com"), 200);
}

#[test]
fn the_list_pages_by_its_cursor_newest_first() {
    let path = fresh_store("pages", |store| async move {
        for n in 0..120 {
            ordered(&store, format!("order-{n:03}"), n).await;
        }
    });
    let store = SqliteStore::open_read_only(&path).expect("opens");
    let addr = serve(View::new(store));
    let ids = |body: &str| -> Vec<String> {
        body.split(r#"<tr data-run=""#)
            .skip(1)
            .map(|row| row.split('"').next().unwrap_or_default().to_owned())
            .collect()
    };
    let link = |body: &str, name: &str| -> Option<String> {
        let tag = format!(r#"<a id="{name}" href=""#);
        let at = body.find(&tag)? + tag.len();
        Some(body[at..].split('"').next()?.replace("&amp;", "&"))
    };
    // The filter form shows the page's order, whichever way the store read the page.
    let shows_oldest = |body: &str| body.contains(r#"<option value="oldest" selected>"#);
    for (order, first) in [("newest", "order-119"), ("oldest", "order-000")] {
        let mut page = format!("/runs?order={order}&workflow=Order");
        let mut pages: Vec<Vec<String>> = Vec::new();
        let last = loop {
            let answer = get(addr, &page);
            assert_eq!(answer.status, 200, "{page}: {}", answer.body);
            pages.push(ids(&answer.body));
            assert_eq!(
                link(&answer.body, "previous").is_some(),
                pages.len() > 1,
                "{page}: a previous page from the second on"
            );
            match link(&answer.body, "next") {
                Some(link) => page = link,
                None => break answer.body,
            }
            assert!(pages.len() < 10, "the pages end");
        };
        let sizes: Vec<usize> = pages.iter().map(Vec::len).collect();
        assert_eq!(sizes, [50, 50, 20]);
        let seen = pages.concat();
        assert_eq!(seen[0], first);
        let mut sorted = seen.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), 120, "no run twice");
        // Back from the last page: the same pages, in the same order within each, and the
        // first page has no page before it.
        let mut back = vec![pages[2].clone()];
        let mut body = last.clone();
        while let Some(previous) = link(&body, "previous") {
            let answer = get(addr, &previous);
            assert_eq!(answer.status, 200, "{previous}: {}", answer.body);
            back.push(ids(&answer.body));
            assert!(
                link(&answer.body, "next").is_some(),
                "{previous}: a next page"
            );
            assert_eq!(shows_oldest(&answer.body), order == "oldest", "{previous}");
            body = answer.body;
            assert!(back.len() < 10, "the pages end");
        }
        back.reverse();
        assert_eq!(back, pages, "{order}: paged back");
        assert!(
            link(&body, "first").is_none(),
            "the first page links to no first page"
        );
        // The last page's link to the first page leads there.
        let start = link(&last, "first").expect("the last page links to the first");
        assert_eq!(ids(&get(addr, &start).body), pages[0], "{start}");
    }
    // Pages that end the list exactly: the last one has no next page.
    let first = get(addr, "/runs?workflow=Order&limit=60");
    let second = get(addr, &link(&first.body, "next").expect("a second page"));
    assert_eq!((ids(&first.body).len(), ids(&second.body).len()), (60, 60));
    assert!(link(&second.body, "next").is_none(), "{}", second.body);
    // A page before a run that is not in the list (made in 1970, say) links on only where runs
    // are: the 50 oldest, newest first, with newer runs before them and none after.
    let stray = get(addr, "/runs?workflow=Order&before=0:a");
    assert_eq!(
        ids(&stray.body).first().map(String::as_str),
        Some("order-049")
    );
    assert_eq!(
        ids(&stray.body).last().map(String::as_str),
        Some("order-000")
    );
    assert!(link(&stray.body, "previous").is_some());
    assert!(link(&stray.body, "next").is_none(), "{}", stray.body);
    // After a run that is not in the list (made in 2286): an empty page that links to the
    // first page only.
    let past = get(
        addr,
        "/runs?workflow=Order&order=oldest&after=9999999999999:x",
    );
    assert!(past.body.contains("No run matches."), "{}", past.body);
    assert!(link(&past.body, "first").is_some());
    assert!(link(&past.body, "previous").is_none() && link(&past.body, "next").is_none());
    assert!(!shows_oldest(&stray.body) && shows_oldest(&past.body));
    // Before the newest run there is nothing (here: before a run made in the year 2286): an
    // empty page that links to the first.
    let newest = "/runs?workflow=Order&limit=10&before=9999999999999:x";
    let empty = get(addr, newest);
    assert_eq!(empty.status, 200, "{newest}: {}", empty.body);
    assert!(empty.body.contains("No run matches."), "{}", empty.body);
    assert!(link(&empty.body, "first").is_some());
    assert!(link(&empty.body, "next").is_none() && link(&empty.body, "previous").is_none());
    // A page is after one run or before one.
    let both = get(addr, "/runs?after=1:a&before=2:b");
    assert_eq!(both.status, 400);
    assert!(both.body.contains("not both"), "{}", both.body);
    // A filter that matches nothing says so.
    let none = get(addr, "/runs?id=zzz");
    assert!(none.body.contains("No run matches."));
    // A request that never ends its head is the server's problem, not a hang of ours.
    let half = request(addr, "GET", "/runs?limit=1", &[], "");
    assert_eq!(half.status, 200);
}

async fn pack(line: u64) -> Result<u64, Never> {
    Ok(line)
}

workflow! {
    /// Packs every line.
    #[flow(durable)]
    Packing(lines: u64) -> usize {
        packed = ForEach(line in 0..lines) {
            parcel = Operation(pack(line))
            => parcel
        }
        => packed.len()
    }
}

/// A run of 700 nest instances: its page lists 500 of their steps and instances and says how
/// many more there are, and its timeline draws 300 lines.
#[test]
fn a_run_of_many_instances_has_a_page_of_bounded_size() {
    let path = fresh_store("many", |store| async move {
        let outcome = Packing::runner()
            .durable(&store, "big")
            .execute(700)
            .await
            .expect("runs");
        assert_eq!(outcome.result.expect("succeeds"), 700);
    });
    let store = SqliteStore::open_read_only(&path).expect("opens");
    let addr = serve(View::new(store));
    let page = get(addr, "/runs/big");
    assert_eq!(page.status, 200);
    assert_eq!(page.body.matches(r#"<tr data-step="packed["#).count(), 500);
    assert!(
        page.body
            .contains("200 more steps of nest instances are not listed")
    );
    assert_eq!(page.body.matches("<tr data-instance=").count(), 500);
    assert!(page.body.contains("200 more instances are not listed"));
    assert_eq!(page.body.matches(r#"<g class="line""#).count(), 300);
    assert!(
        page.body.contains("401 more lines not drawn"),
        "the run's own step, 700 instances' steps"
    );
}

/// `/metrics`: the process's text and the store's gauges, the runs due that no worker took
/// among them.
#[test]
fn metrics_report_the_stores_unfinished_and_due_runs() {
    let path = fresh_store("metrics", |store| async move {
        ordered(&store, "done", 1).await;
        for id in ["w1", "w2"] {
            let waiting = Confirming::runner()
                .durable(&store, id)
                .unload_when_waiting(Duration::ZERO)
                .execute(1)
                .await
                .expect("runs");
            assert!(waiting.is_unloaded());
        }
        // A signal its step waits for makes `w2` due: work for a worker, that none has taken.
        store
            .send_signal(NewSignal {
                run: "w2".into(),
                name: "confirm".into(),
                payload: b"true".to_vec(),
                mode: SignalMode::Kept,
            })
            .await
            .expect("stored");
    });
    let plain = serve(View::new(
        SqliteStore::open_read_only(&path).expect("opens"),
    ));
    assert_eq!(
        get(plain, "/metrics").status,
        404,
        "no metrics unless asked for"
    );
    let addr = serve(
        View::new(SqliteStore::open_read_only(&path).expect("opens"))
            .metrics(|| "# the process's own\n".to_owned())
            .store_metrics(),
    );
    let scrape = get(addr, "/metrics");
    assert_eq!(scrape.status, 200, "{}", scrape.body);
    assert!(scrape.headers["content-type"].starts_with("text/plain; version=0.0.4"));
    let body = scrape.body;
    assert!(body.starts_with("# the process's own\n"), "{body}");
    assert!(
        body.contains("flow_store_runs{workflow=\"Confirming\",status=\"waiting\"} 2\n"),
        "{body}"
    );
    assert!(
        !body.contains("status=\"succeeded\""),
        "finished runs are not gauged: {body}"
    );
    assert!(
        body.contains("flow_store_runs_due{workflow=\"Confirming\"} 1\n"),
        "{body}"
    );
    assert!(
        body.contains("flow_store_due_lag_seconds{workflow=\"Confirming\"} "),
        "{body}"
    );
}

async fn parcel(order: u64) -> Result<u64, Never> {
    Ok(order * 2)
}

workflow! {
    /// Packs one parcel: the child run.
    #[flow(durable)]
    Parcel(order: u64) -> u64 {
        packed = Operation(parcel(order))
        => packed
    }
}

workflow! {
    /// Ships its order as a child run.
    #[flow(durable)]
    Shipping(order: u64) -> u64 {
        Sequential {
            Operation(fetch(order)),
            shipped = Workflow(Parcel(order)),
        }
        => shipped
    }
}

/// A run's child runs are lines of its timeline, after its steps, and link back to it; a run
/// whose graph cannot start one has no such line.
#[test]
fn child_runs_are_in_their_parents_timeline() {
    let path = fresh_store("children", |store| async move {
        let outcome = Shipping::runner()
            .durable(&store, "parent")
            .execute(4)
            .await
            .expect("runs");
        assert_eq!(outcome.result.expect("succeeds"), 8);
        ordered(&store, "plain", 1).await;
    });
    let store = SqliteStore::open_read_only(&path).expect("opens");
    let runs = runtime()
        .block_on(store.list_runs(&RunFilter::default()))
        .expect("lists");
    let child = runs
        .iter()
        .find(|r| r.id.starts_with("parent/"))
        .unwrap_or_else(|| panic!("a child run: {runs:?}"))
        .id
        .clone();
    let addr = serve(View::new(store));
    let page = get(addr, "/runs/parent");
    assert_eq!(page.status, 200);
    let line = format!(r#"<g class="line" data-line="child run {child}">"#);
    assert!(page.body.contains(&line), "{}", page.body);
    assert!(
        page.body
            .contains(r#"<rect class="span" data-status="succeeded""#),
        "the child's bar in its status"
    );
    let child_page = get(addr, &format!("/runs/{}", enc(&child)));
    assert!(
        child_page
            .body
            .contains(r#"<dt>parent</dt><dd><a href="/runs/parent">parent</a></dd>"#),
        "{}",
        child_page.body
    );
    let plain = get(addr, "/runs/plain");
    assert!(!plain.body.contains("child run"));
}
