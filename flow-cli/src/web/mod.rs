//! `flow serve`: the web view of a store's runs, an [axum] router over any [`Store`].
//!
//! ```no_run
//! # async fn demo(store: flowdag_sqlite::SqliteStore) -> std::io::Result<()> {
//! use flowdag_cli::web::View;
//!
//! // Read-only, on loopback, on a port the system picks:
//! let serving = View::new(store).serve("127.0.0.1:0".parse().unwrap()).await?;
//! println!("view: http://{}/runs", serving.addr());
//! # Ok(()) }
//! ```
//!
//! or mounted in an application's own router: `app.nest("/flow", View::new(store).base("/flow").router())`.
//!
//! Pages: the list of runs (`/runs`, filtered by workflow, status, creation time and id text,
//! a page at a time by a keyset cursor, newest first), one run (`/runs/{id}`: its graph with
//! each step in its status's colour, the timeline of its attempts, its steps with their
//! attempts, errors and outputs, its nest instances, compensations, signals and events, kept
//! up to date by polling while it runs), a workflow's graph (`/workflows/{name}`), and, at
//! `/metrics`, the Prometheus text of [`View::metrics`] and [`View::store_metrics`].
//!
//! The view only reads unless [`View::allow_actions`] is on: then a run's page has forms to
//! send a signal (checked against the workflow's declared signals when it is
//! [registered](View::register)), cancel and redrive, as the command line does: the signal
//! checked against the workflow's declaration (its name declared, its payload of its type, not
//! an operator's reserved name) and stored with [`Store::send_signal`], [`cancel_run`],
//! [`redrive_run`]. A form carries a token of this process and a request
//! from another origin is refused. Every value from the store is escaped; every page is
//! sent with a strict Content-Security-Policy (no inline script, nothing from elsewhere).

mod html;
mod svg;

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::hash::{BuildHasher, Hasher};
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Path as UrlPath, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use flowdag_runtime::durable::{
    DurableError, DurableWorkflow, Stop, cancel_run, graph_rows, redrive_run,
};
use flowdag_runtime::store::{
    NewSignal, NodeRow, RunCursor, RunFilter, RunStatus, RunSummary, SignalSent, Store, StoreError,
    StoredEvent, StoredSignal,
};
use serde_json::{Value, json};

use self::html::{Frame, esc, page, url};
use crate::{
    CheckFn, Projected, SignalRefusal, Step, detail, lineage, parse_time, project, signal_mode,
    signal_note, step_name, summary, thousands, utc,
};

/// How many runs a page of the list shows unless `limit` says otherwise, and at most.
const PAGE: u32 = 50;
const MAX_PAGE: u32 = 500;
/// The longest query string taken (longer: 400).
const MAX_QUERY: usize = 4096;
/// The longest signal name an action takes.
const MAX_NAME: usize = 256;
/// The largest form taken (larger: 413).
const MAX_FORM: usize = 64 * 1024;
/// How many of a run's events its page lists (the newest; the rest are counted).
const EVENTS_SHOWN: usize = 1000;
/// How many of a run's signals its page lists (the newest).
const SIGNALS_SHOWN: usize = 200;
/// How many child runs a run's page draws.
const CHILDREN_SHOWN: u32 = 100;
/// How many steps of nest instances, and how many instances, a run's page lists.
const ROWS: usize = 500;

/// The web view of a store: build it, then [`View::router`] or [`View::serve`].
pub struct View {
    shared: Shared,
}

/// What every request reads.
struct Shared {
    store: Arc<dyn Store>,
    /// The store's name in the header.
    name: String,
    base: String,
    workflows: BTreeMap<String, Known>,
    actions: bool,
    /// The token every action's form carries: a page of this process made it.
    token: String,
    metrics: Option<Arc<dyn Fn() -> String + Send + Sync>>,
    /// The names a request's `Host` may give besides loopback ones; `None`: any.
    hosts: Option<Vec<String>>,
    /// Whether `/metrics` reports the store's gauges ([`View::store_metrics`]).
    store_metrics: bool,
}

/// A workflow of this binary's: its graph and its signals.
#[derive(Clone)]
pub(crate) struct Known {
    /// Its node rows (as a run of it stores them).
    pub(crate) rows: Vec<NodeRow>,
    /// Checks a signal for a run of it.
    pub(crate) check: CheckFn,
    /// Its declared signals: name and the input of its payload.
    pub(crate) signals: Vec<(String, Input)>,
}

impl Known {
    pub(crate) fn of<W: DurableWorkflow>() -> Known {
        let graph = &W::GRAPH;
        // One form per signal name, however many steps wait for it.
        let mut signals: Vec<(String, Input)> = Vec::new();
        for info in graph.__plan().control.signals {
            if !signals.iter().any(|(name, _)| name == info.name) {
                signals.push((info.name.to_owned(), Input::of((info.payload)())));
            }
        }
        Known {
            rows: graph_rows(graph).1,
            check: W::__check_signal,
            signals,
        }
    }
}

/// The input a signal's form has for its payload, by the payload's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Input {
    /// `()`: no input.
    Unit,
    /// `bool`: a checkbox.
    Bool,
    /// `String`: a text field.
    Text,
    /// An integer: a number field.
    Integer,
    /// A float: a number field with any step.
    Float,
    /// Anything else: JSON.
    Json,
}

impl Input {
    fn of(id: std::any::TypeId) -> Input {
        use std::any::TypeId;
        let is = |t: TypeId| t == id;
        if is(TypeId::of::<()>()) {
            Input::Unit
        } else if is(TypeId::of::<bool>()) {
            Input::Bool
        } else if is(TypeId::of::<String>()) {
            Input::Text
        } else if [
            TypeId::of::<u8>(),
            TypeId::of::<u16>(),
            TypeId::of::<u32>(),
            TypeId::of::<u64>(),
            TypeId::of::<usize>(),
            TypeId::of::<i8>(),
            TypeId::of::<i16>(),
            TypeId::of::<i32>(),
            TypeId::of::<i64>(),
            TypeId::of::<isize>(),
        ]
        .into_iter()
        .any(is)
        {
            Input::Integer
        } else if is(TypeId::of::<f32>()) || is(TypeId::of::<f64>()) {
            Input::Float
        } else {
            Input::Json
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Input::Unit => "unit",
            Input::Bool => "bool",
            Input::Text => "text",
            Input::Integer => "integer",
            Input::Float => "float",
            Input::Json => "json",
        }
    }

    fn parse(text: &str) -> Option<Input> {
        [
            Input::Unit,
            Input::Bool,
            Input::Text,
            Input::Integer,
            Input::Float,
            Input::Json,
        ]
        .into_iter()
        .find(|i| i.as_str() == text)
    }
}

impl View {
    /// A read-only view of `store`, mounted at the root, that knows no workflow.
    pub fn new(store: impl Store) -> View {
        View::from_arc(Arc::new(store))
    }

    /// A view of a store already shared.
    pub fn from_arc(store: Arc<dyn Store>) -> View {
        View {
            shared: Shared {
                store,
                name: String::new(),
                base: String::new(),
                workflows: BTreeMap::new(),
                actions: false,
                token: token(),
                metrics: None,
                hosts: Some(Vec::new()),
                store_metrics: false,
            },
        }
    }

    /// Registers `W`: its workflow page draws its graph before any run of it exists, and a
    /// signal sent to a run of it gets a form for its declared payload and is checked before
    /// it is stored (its name declared, its payload of the declared type).
    pub fn register<W: DurableWorkflow>(mut self) -> View {
        self.shared
            .workflows
            .insert(W::durable_name().into_owned(), Known::of::<W>());
        self
    }

    pub(crate) fn known(mut self, name: String, known: Known) -> View {
        self.shared.workflows.insert(name, known);
        self
    }

    /// Turns the actions on (`true`) or off: sending a signal, cancelling and redriving a run.
    /// Off by default: the view never writes to the store, and says so.
    pub fn allow_actions(mut self, allow: bool) -> View {
        self.shared.actions = allow;
        self
    }

    /// The path the router is mounted under (`"/flow"` for `app.nest("/flow", ..)`), which
    /// the pages' links start with. Empty (the root) by default.
    pub fn base(mut self, base: &str) -> View {
        self.shared.base = base.trim_end_matches('/').to_owned();
        self
    }

    /// The store's name shown in the header of every page (its file, its server).
    pub fn name(mut self, name: &str) -> View {
        self.shared.name = name.to_owned();
        self
    }

    /// Lets requests whose `Host` is `host` (a name or an address, with or without its port:
    /// `flow.example.com`, `10.0.0.5:7070`) through. By default only loopback names and
    /// addresses are (`localhost`, `127.0.0.1`, `[::1]`): a page of another site that makes
    /// its own name point at this machine (DNS rebinding) is refused (421), so it can read
    /// nothing and send nothing.
    pub fn allow_host(mut self, host: &str) -> View {
        if let Some(hosts) = &mut self.shared.hosts {
            hosts.push(host.to_ascii_lowercase());
        }
        self
    }

    /// Lets requests of any `Host` through: for a view behind a proxy that authenticates
    /// and sets `Host` itself.
    pub fn allow_any_host(mut self) -> View {
        self.shared.hosts = None;
        self
    }

    /// Serves `render()` (the Prometheus text of the process's metrics) at `/metrics`.
    pub fn metrics(mut self, render: impl Fn() -> String + Send + Sync + 'static) -> View {
        self.shared.metrics = Some(Arc::new(render));
        self
    }

    /// Reports the store's own gauges at `/metrics`, read from the store at each scrape (its
    /// unfinished runs: at most 100,000 are read), in Prometheus's text format:
    ///
    /// | name | labels | what |
    /// |---|---|---|
    /// | `flow_store_runs` | workflow, status | unfinished runs (`running`, `waiting`, `compensating`, `stuck`) |
    /// | `flow_store_runs_due` | workflow | runs a worker may pick up now ([`RunSummary::is_due`]: awake, and no live lease holds them): work no worker has taken yet |
    /// | `flow_store_due_lag_seconds` | workflow | how long the oldest of those has been due ([`RunSummary::due_since_ms`]) |
    ///
    /// What the fleet's processes record themselves (runs finished, attempts, step durations)
    /// is each process's own endpoint's (`Worker::prometheus`, [`View::metrics`]); these
    /// gauges are what only the store knows, and what `flow serve --metrics` reports.
    pub fn store_metrics(mut self) -> View {
        self.shared.store_metrics = true;
        self
    }

    /// The routes of the view, for [`axum::serve()`] or to nest in an application's router.
    pub fn router(self) -> Router {
        let actions = self.shared.actions;
        let shared = Arc::new(self.shared);
        let router = Router::new()
            .route("/", get(index))
            .route("/runs", get(runs_page))
            .route("/runs/{id}", get(run_page))
            .route("/runs/{id}/live", get(live))
            .route("/runs/{id}/value", get(value))
            .route("/workflows/{name}", get(workflow_page))
            .route("/static/view.css", get(css))
            .route("/static/view.js", get(js))
            .route("/metrics", get(metrics))
            .route("/favicon.ico", get(|| async { StatusCode::NO_CONTENT }));
        let router = if actions {
            router
                .route("/runs/{id}/signal", post(signal))
                .route("/runs/{id}/cancel", post(cancel))
                .route("/runs/{id}/redrive", post(redrive))
        } else {
            router
                .route("/runs/{id}/signal", post(read_only))
                .route("/runs/{id}/cancel", post(read_only))
                .route("/runs/{id}/redrive", post(read_only))
        };
        router
            .fallback(not_found)
            .layer(DefaultBodyLimit::max(MAX_FORM))
            .layer(axum::middleware::from_fn_with_state(
                Arc::clone(&shared),
                check_host,
            ))
            .layer(axum::middleware::map_response(secure))
            .with_state(shared)
    }

    /// Serves the view on `addr` (on a task of the current tokio runtime) until the returned
    /// [`Serving`] is dropped. `127.0.0.1:0` picks a free port: [`Serving::addr`] says which.
    ///
    /// # Errors
    ///
    /// The address cannot be bound.
    pub async fn serve(self, addr: SocketAddr) -> std::io::Result<Serving> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let router = self.router();
        let task = tokio::spawn(async move { axum::serve(listener, router).await });
        Ok(Serving { addr, task })
    }
}

impl std::fmt::Debug for View {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("View")
            .field("name", &self.shared.name)
            .field("base", &self.shared.base)
            .field(
                "workflows",
                &self.shared.workflows.keys().collect::<Vec<_>>(),
            )
            .field("actions", &self.shared.actions)
            .finish_non_exhaustive()
    }
}

/// A view being served ([`View::serve`]); dropping it stops the server.
#[derive(Debug)]
pub struct Serving {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Serving {
    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A router that answers every request with an error page saying `why` the store `name`
/// cannot be served (500): what `flow serve` serves when the store cannot be opened.
pub(crate) fn unavailable(name: &str, why: &str) -> Router {
    let shared = Arc::new(
        View::new(flowdag_runtime::store::MemoryStore::new())
            .name(name)
            .allow_any_host()
            .shared,
    );
    let why = why.to_owned();
    Router::new()
        .route("/static/view.css", get(css))
        .route("/static/view.js", get(js))
        .fallback(move |State(shared): State<Arc<Shared>>| {
            let why = why.clone();
            async move {
                let body = format!(
                    r#"<section class="error" id="failure"><h1>The store cannot be read</h1><p>{}</p><p>Fix the store (or the address) and start the view again.</p></section>"#,
                    esc(&why)
                );
                (StatusCode::INTERNAL_SERVER_ERROR, html_page(&shared, "Store unavailable", &body))
            }
        })
        .layer(axum::middleware::map_response(secure))
        .with_state(shared)
}

/// A token no other process guesses: the random keys of the standard library's hasher.
fn token() -> String {
    let state = std::collections::hash_map::RandomState::new();
    let mut a = state.build_hasher();
    a.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    let mut b = std::collections::hash_map::RandomState::new().build_hasher();
    b.write_u32(std::process::id());
    format!("{:016x}{:016x}", a.finish(), b.finish())
}

/// Why a request failed: its status and page.
#[derive(Debug)]
enum Failure {
    /// The request is malformed: 400 with why.
    Bad(String),
    /// No such run, workflow or value: 404.
    Missing(String),
    /// The store failed: an error page ([`store_status`]: 500 for a store that cannot be
    /// read as it is, 503 otherwise).
    Store(StoreError),
    /// The run's state refuses the action: 409.
    Refused(String),
    /// An action without this process's token or from another origin: 403.
    Forbidden(String),
}

impl From<StoreError> for Failure {
    fn from(error: StoreError) -> Failure {
        match error {
            StoreError::NotFound { run } => {
                Failure::Missing(format!("no run `{run}` in this store"))
            }
            error => Failure::Store(error),
        }
    }
}

impl From<DurableError> for Failure {
    fn from(error: DurableError) -> Failure {
        match error {
            DurableError::Store(StoreError::WrongStatus { run, status, needs }) => {
                Failure::Refused(format!("run `{run}` is {status}: {needs}"))
            }
            DurableError::Store(StoreError::Finished { run }) => {
                Failure::Refused(format!("run `{run}` has finished"))
            }
            DurableError::Redrive { run, why } => {
                Failure::Refused(format!("run `{run}` cannot be redriven: {why}"))
            }
            DurableError::Store(error) => Failure::from(error),
            error => Failure::Refused(error.to_string()),
        }
    }
}

/// A failure's page, with the frame of `shared`.
fn failure(shared: &Shared, failure: Failure) -> Response {
    let (status, title, why) = match failure {
        Failure::Bad(why) => (StatusCode::BAD_REQUEST, "Bad request", why),
        Failure::Missing(why) => (StatusCode::NOT_FOUND, "Not found", why),
        Failure::Refused(why) => (StatusCode::CONFLICT, "Refused", why),
        Failure::Forbidden(why) => (StatusCode::FORBIDDEN, "Forbidden", why),
        Failure::Store(error) => (store_status(&error), "The store failed", error.to_string()),
    };
    let body = format!(
        r#"<section class="error" id="failure"><h1>{title}</h1><p>{}</p><p><a href="{}/runs">all runs</a></p></section>"#,
        esc(&why),
        shared.base
    );
    (status, html_page(shared, title, &body)).into_response()
}

/// The status of a store's failure: 500 for a store that cannot be read as it is, 503 for one
/// that may answer later.
fn store_status(error: &StoreError) -> StatusCode {
    match error {
        StoreError::Corrupt { .. }
        | StoreError::Foreign { .. }
        | StoreError::SchemaVersion { .. } => StatusCode::INTERNAL_SERVER_ERROR,
        _ => StatusCode::SERVICE_UNAVAILABLE,
    }
}

fn frame(shared: &Shared) -> Frame<'_> {
    Frame {
        base: &shared.base,
        store: &shared.name,
        actions: shared.actions,
    }
}

fn html_page(shared: &Shared, title: &str, body: &str) -> Response {
    (
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        page(&frame(shared), title, body),
    )
        .into_response()
}

/// Adds the headers every answer carries: no script or style from anywhere but the view,
/// no framing, no sniffing, no caching of a run's state. The referrer policy is
/// `same-origin`, not `no-referrer`: under `no-referrer` a browser sends a form's `Origin` as
/// `null`, and the actions' same-origin check would refuse every form.
async fn secure(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    headers
        .entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    response
}

/// The parameters of a query string, refusing one that is too long, malformed, repeats a
/// parameter that takes one value, or names one that `known` does not list.
fn params(uri: &Uri, known: &[&str]) -> Result<HashMap<String, String>, Failure> {
    let query = uri.query().unwrap_or("");
    if query.len() > MAX_QUERY {
        return Err(Failure::Bad(format!(
            "the query is {} bytes long; at most {MAX_QUERY} are taken",
            query.len()
        )));
    }
    let pairs = axum::extract::Query::<Vec<(String, String)>>::try_from_uri(uri)
        .map_err(|error| Failure::Bad(format!("the query cannot be read: {error}")))?
        .0;
    let mut out: HashMap<String, String> = HashMap::new();
    for (key, value) in pairs {
        if !known.contains(&key.as_str()) {
            return Err(Failure::Bad(format!(
                "unknown parameter `{}`: this page takes {}",
                key,
                known.join(", ")
            )));
        }
        if value.is_empty() {
            continue;
        }
        if key == "status" {
            if let Some(before) = out.get_mut("status") {
                before.push(',');
                before.push_str(&value);
                continue;
            }
        } else if out.contains_key(&key) {
            return Err(Failure::Bad(format!("parameter `{key}` is given twice")));
        }
        out.insert(key, value);
    }
    Ok(out)
}

/// Whether `host` (a `Host` header: a name or an address, maybe with a port) is a loopback
/// one or one of `allowed`.
fn host_allowed(host: &str, allowed: &[String]) -> bool {
    let host = host.to_ascii_lowercase();
    let name = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => host.rsplit_once(':').map_or(host.as_str(), |(name, port)| {
            if port.bytes().all(|b| b.is_ascii_digit()) {
                name
            } else {
                host.as_str()
            }
        }),
    };
    let loopback = name == "localhost"
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    loopback || allowed.iter().any(|a| *a == host || *a == name)
}

/// Refuses a request whose `Host` the view does not answer to (421): see [`View::allow_host`].
async fn check_host(
    State(shared): State<Arc<Shared>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    if let Some(allowed) = &shared.hosts {
        let host = request
            .headers()
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .or_else(|| request.uri().authority().map(|a| a.as_str()))
            .unwrap_or("");
        if !host_allowed(host, allowed) {
            let mut response = failure(
                &shared,
                Failure::Forbidden(format!(
                    "this view answers to loopback names only, not to `{host}`: start it with `--allow-host {host}` (`View::allow_host`) to be reached by that name"
                )),
            );
            *response.status_mut() = StatusCode::MISDIRECTED_REQUEST;
            return response;
        }
    }
    next.run(request).await
}

/// An action asked of a read-only view: 405, nothing read or written.
async fn read_only(State(shared): State<Arc<Shared>>) -> Response {
    let mut response = failure(
        &shared,
        Failure::Bad(
            "this view is read-only: start it with `--allow-actions` (`View::allow_actions`) to send signals, cancel and redrive runs"
                .to_owned(),
        ),
    );
    *response.status_mut() = StatusCode::METHOD_NOT_ALLOWED;
    response
        .headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static(""));
    response
}

async fn index(State(shared): State<Arc<Shared>>) -> Redirect {
    Redirect::to(&format!("{}/runs", shared.base))
}

async fn not_found(State(shared): State<Arc<Shared>>, uri: Uri) -> Response {
    failure(
        &shared,
        Failure::Missing(format!("nothing at `{}`", uri.path())),
    )
}

/// A file of the view's own, cached for five minutes.
fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "max-age=300"),
        ],
        body,
    )
        .into_response()
}

async fn css() -> Response {
    asset("text/css; charset=utf-8", include_str!("view.css"))
}

async fn js() -> Response {
    asset("text/javascript; charset=utf-8", include_str!("view.js"))
}

async fn metrics(State(shared): State<Arc<Shared>>) -> Response {
    if shared.metrics.is_none() && !shared.store_metrics {
        return failure(
            &shared,
            Failure::Missing(
                "no metrics here: start the view with metrics on (`flow serve --metrics`, `View::metrics`, `View::store_metrics`)"
                    .to_owned(),
            ),
        );
    }
    let mut text = shared
        .metrics
        .as_ref()
        .map_or_else(String::new, |render| render());
    if shared.store_metrics {
        match store_gauges(&shared).await {
            Ok(gauges) => text.push_str(&gauges),
            Err(error) => {
                return (
                    store_status(&error),
                    [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
                    format!("the store failed: {error}\n"),
                )
                    .into_response();
            }
        }
    }
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

/// A label value in Prometheus's text format: `\`, `"` and line breaks escaped.
fn label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The store's gauges ([`View::store_metrics`]).
async fn store_gauges(shared: &Shared) -> Result<String, StoreError> {
    let unfinished: Vec<RunStatus> = RunStatus::ALL
        .into_iter()
        .filter(|s| !s.is_finished())
        .collect();
    let runs = shared
        .store
        .list_runs(&RunFilter {
            statuses: unfinished,
            limit: Some(100_000),
            ..RunFilter::default()
        })
        .await?;
    let now = now_ms();
    let mut by_status: BTreeMap<(&str, &str), u64> = BTreeMap::new();
    let mut due: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    for run in &runs {
        *by_status
            .entry((run.workflow.as_str(), run.status.as_str()))
            .or_default() += 1;
        // Due as a worker judges it: free of any live lease, and awake.
        if run.is_due(now) {
            let entry = due.entry(run.workflow.as_str()).or_default();
            entry.0 += 1;
            entry.1 = entry.1.max(now.saturating_sub(run.due_since_ms()));
        }
    }
    let mut out = String::new();
    gauge(
        &mut out,
        "flow_store_runs",
        "Unfinished runs in the store, by workflow and status.",
        by_status.iter().map(|((workflow, status), n)| {
            let labels = format!("workflow=\"{}\",status=\"{status}\"", label(workflow));
            (labels, n.to_string())
        }),
    );
    let by_workflow = |workflow: &str| format!("workflow=\"{}\"", label(workflow));
    gauge(
        &mut out,
        "flow_store_runs_due",
        "Runs a worker may pick up now: work no worker has taken yet.",
        due.iter()
            .map(|(workflow, (n, _))| (by_workflow(workflow), n.to_string())),
    );
    gauge(
        &mut out,
        "flow_store_due_lag_seconds",
        "How long the oldest of those has been due.",
        due.iter().map(|(workflow, (_, lag))| {
            (
                by_workflow(workflow),
                format!("{:.3}", *lag as f64 / 1000.0),
            )
        }),
    );
    Ok(out)
}

/// Writes one gauge in Prometheus's text format: its help and type, then a sample for each
/// pair of labels (`key="value",…`) and value.
fn gauge(
    out: &mut String,
    name: &str,
    help: &str,
    samples: impl IntoIterator<Item = (String, String)>,
) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
    for (labels, value) in samples {
        let _ = writeln!(out, "{name}{{{labels}}} {value}");
    }
}

// ---------------------------------------------------------------------------------------
// The list of runs.

/// The filter of the list's query: `workflow`, `status` (comma-separated or repeated),
/// `from` and `until` (creation times, as `flow runs` takes them), `id` (text in the id),
/// `order` (`newest`, the default, or `oldest`), `after` (the cursor `MS:ID` of the last run
/// of the page before) or `before` (that of the first run of the page after), `limit` (1 to
/// 500).
///
/// A page `before` a cursor is read as the store reads every page: in the opposite order,
/// from the cursor on. [`Listing::backwards`] says so, and the page is turned round after.
fn list_filter(query: &HashMap<String, String>) -> Result<Listing, Failure> {
    let mut filter = RunFilter {
        workflow: query.get("workflow").cloned(),
        id_contains: query.get("id").cloned(),
        newest_first: true,
        limit: Some(PAGE),
        ..RunFilter::default()
    };
    if let Some(statuses) = query.get("status") {
        for name in statuses.split(',').filter(|s| !s.is_empty()) {
            let status: RunStatus = name.parse().map_err(|_| {
                Failure::Bad(format!(
                    "`{name}` is not a status: one of {}",
                    RunStatus::ALL.map(RunStatus::as_str).join(", ")
                ))
            })?;
            if !filter.statuses.contains(&status) {
                filter.statuses.push(status);
            }
        }
    }
    let time = |key: &str| -> Result<Option<u64>, Failure> {
        query
            .get(key)
            .map(|text| parse_time(text).map_err(|why| Failure::Bad(format!("`{key}`: {why}"))))
            .transpose()
    };
    filter.created_from_ms = time("from")?;
    filter.created_before_ms = time("until")?;
    match query.get("order").map(String::as_str) {
        None | Some("newest") => {}
        Some("oldest") => filter.newest_first = false,
        Some(other) => {
            return Err(Failure::Bad(format!(
                "`order` is `newest` or `oldest`, not `{other}`"
            )));
        }
    }
    if let Some(limit) = query.get("limit") {
        match limit.parse::<u32>() {
            Ok(n @ 1..=MAX_PAGE) => filter.limit = Some(n),
            _ => {
                return Err(Failure::Bad(format!(
                    "`limit` is a number from 1 to {MAX_PAGE}, not `{limit}`"
                )));
            }
        }
    }
    let cursor = |key: &str, which: &str| -> Result<Option<RunCursor>, Failure> {
        let Some(text) = query.get(key) else {
            return Ok(None);
        };
        text.split_once(':')
            .and_then(|(ms, id)| {
                Some(RunCursor {
                    created_ms: ms.parse::<u64>().ok()?,
                    id: id.to_owned(),
                })
            })
            .map(Some)
            .ok_or_else(|| {
                Failure::Bad(format!(
                    "`{key}` is the place `MS:ID` of the {which} run of a page, not `{text}`"
                ))
            })
    };
    let backwards = match (cursor("after", "last")?, cursor("before", "first")?) {
        (Some(_), Some(_)) => {
            return Err(Failure::Bad(
                "a page is `after` one run or `before` one, not both".to_owned(),
            ));
        }
        (after, None) => {
            filter.after = after;
            false
        }
        (None, Some(before)) => {
            filter.after = Some(before);
            filter.newest_first = !filter.newest_first;
            true
        }
    };
    Ok(Listing { filter, backwards })
}

/// The store's query for a page of the list, and which way it reads.
struct Listing {
    /// What the store is asked for: the page's filter, with the order turned round when the
    /// page is `before` a cursor.
    filter: RunFilter,
    /// The page is `before` a cursor: the store reads it from there towards the list's start.
    backwards: bool,
}

/// Where a link of the list's navigation goes: the same filter, from `cursor` on.
enum Turn<'a> {
    /// The first page.
    First,
    /// The page after this run.
    After(&'a RunCursor),
    /// The page before this run.
    Before(&'a RunCursor),
}

/// The query string of the list's parameters, with the cursor that `turn` names.
fn list_query(query: &HashMap<String, String>, turn: Turn<'_>) -> String {
    let mut keys: Vec<&String> = query
        .keys()
        .filter(|k| *k != "after" && *k != "before")
        .collect();
    keys.sort();
    let mut out: Vec<String> = keys
        .into_iter()
        .map(|k| format!("{}={}", url(k), url(&query[k])))
        .collect();
    let (key, cursor) = match turn {
        Turn::First => return out.join("&amp;"),
        Turn::After(cursor) => ("after", cursor),
        Turn::Before(cursor) => ("before", cursor),
    };
    out.push(format!(
        "{key}={}",
        url(&format!("{}:{}", cursor.created_ms, cursor.id))
    ));
    out.join("&amp;")
}

/// Now, in ms since the Unix epoch (this process's clock): how long an unfinished run has
/// taken so far.
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn duration_text(ms: u64) -> String {
    match ms {
        0..1_000 => format!("{ms} ms"),
        1_000..60_000 => format!("{:.1} s", ms as f64 / 1000.0),
        60_000..3_600_000 => format!("{}m {:02}s", ms / 60_000, ms / 1000 % 60),
        _ => format!("{}h {:02}m", ms / 3_600_000, ms / 60_000 % 60),
    }
}

async fn runs_page(State(shared): State<Arc<Shared>>, uri: Uri) -> Response {
    match runs_body(&shared, &uri).await {
        Ok(body) => html_page(&shared, "Runs", &body),
        Err(error) => failure(&shared, error),
    }
}

async fn runs_body(shared: &Shared, uri: &Uri) -> Result<String, Failure> {
    let query = params(
        uri,
        &[
            "workflow", "status", "from", "until", "id", "order", "after", "before", "limit",
        ],
    )?;
    let Listing {
        mut filter,
        backwards,
    } = list_filter(&query)?;
    // One run more than the page shows: whether there is a page beyond it.
    let limit = filter.limit.unwrap_or(PAGE) as usize;
    filter.limit = Some(filter.limit.unwrap_or(PAGE) + 1);
    let mut runs = shared.store.list_runs(&filter).await?;
    let beyond = runs.len() > limit;
    runs.truncate(limit);
    if backwards {
        runs.reverse();
        filter.newest_first = !filter.newest_first;
    }
    // Whether a page lies on the other side of the page from the cursor is asked of the store:
    // the cursor's run may have been deleted, or may no longer match the filter.
    let cursor = filter.after.is_some();
    let (earlier, later) = match (backwards, runs.first(), runs.last()) {
        (true, _, Some(last)) => (beyond, any_beyond(shared, &filter, last, true).await?),
        (false, Some(first), _) if cursor => {
            (any_beyond(shared, &filter, first, false).await?, beyond)
        }
        _ => (false, beyond),
    };
    let base = &shared.base;
    let q = |key: &str| query.get(key).map_or_else(String::new, |v| esc(v));
    let mut body = String::from(r#"<h1>Runs</h1><form class="filter" method="get" action="">"#);
    let _ = write!(
        body,
        r#"<label>workflow <input name="workflow" value="{}"></label> <label>status <select name="status"><option value="">any</option>"#,
        q("workflow")
    );
    for status in RunStatus::ALL {
        let selected = if filter.statuses == [status] {
            " selected"
        } else {
            ""
        };
        let _ = write!(
            body,
            r#"<option value="{s}"{selected}>{s}</option>"#,
            s = status.as_str()
        );
    }
    let _ = write!(
        body,
        r#"</select></label> <label>from <input name="from" placeholder="2026-11-27T09:30" value="{}"></label> <label>until <input name="until" value="{}"></label> <label>id contains <input name="id" value="{}"></label> <label>order <select name="order"><option value="newest">newest first</option><option value="oldest"{}>oldest first</option></select></label> <button type="submit">Filter</button> <a href="{base}/runs">clear</a></form>"#,
        q("from"),
        q("until"),
        q("id"),
        if filter.newest_first { "" } else { " selected" },
    );
    body.push_str(r#"<table id="runs"><thead><tr><th>run</th><th>workflow</th><th>status</th><th>started</th><th>ended</th><th>duration</th><th>events</th></tr></thead><tbody>"#);
    for run in &runs {
        let ended = run.status.is_finished().then_some(run.updated_ms);
        let took = ended.unwrap_or_else(now_ms).saturating_sub(run.created_ms);
        let _ = write!(
            body,
            r#"<tr data-run="{id}" data-status="{status}"><td><a href="{base}/runs/{link}">{id}</a></td><td><a href="{base}/workflows/{wlink}">{workflow}</a></td><td><span class="status s-{slug}">{status}</span></td><td>{started}</td><td>{ended}</td><td>{took}</td><td>{events}</td></tr>"#,
            id = esc(&run.id),
            link = url(&run.id),
            wlink = url(&run.workflow),
            workflow = esc(&run.workflow),
            status = run.status.as_str(),
            slug = svg::run_slug(run.status.as_str()),
            started = utc(run.created_ms),
            ended = ended.map_or_else(|| "-".to_owned(), utc),
            took = duration_text(took),
            events = run.next_seq,
        );
    }
    body.push_str("</tbody></table>");
    if runs.is_empty() {
        body.push_str(r#"<p class="empty">No run matches.</p>"#);
    }
    body.push_str(r#"<nav class="pages">"#);
    let (first, last) = (
        runs.first().map(RunCursor::of),
        runs.last().map(RunCursor::of),
    );
    // An empty page beside a run: whatever the list holds, the first page shows it.
    if earlier || (cursor && runs.is_empty()) {
        let _ = write!(
            body,
            r#"<a id="first" href="{base}/runs?{}">first page</a> "#,
            list_query(&query, Turn::First)
        );
    }
    if earlier && let Some(first) = &first {
        let _ = write!(
            body,
            r#"<a id="previous" href="{base}/runs?{}">previous page</a> "#,
            list_query(&query, Turn::Before(first))
        );
    }
    if later && let Some(last) = &last {
        let _ = write!(
            body,
            r#"<a id="next" href="{base}/runs?{}">next page</a>"#,
            list_query(&query, Turn::After(last))
        );
    }
    body.push_str("</nav>");
    Ok(body)
}

/// Whether a run of `filter` lies beyond `run`: after it in the list's order when `onwards`,
/// else before it.
async fn any_beyond(
    shared: &Shared,
    filter: &RunFilter,
    run: &RunSummary,
    onwards: bool,
) -> Result<bool, Failure> {
    let beyond = RunFilter {
        after: Some(RunCursor::of(run)),
        limit: Some(1),
        newest_first: filter.newest_first == onwards,
        ..filter.clone()
    };
    Ok(!shared.store.list_runs(&beyond).await?.is_empty())
}

// ---------------------------------------------------------------------------------------
// One run.

/// The run `id`, or 404.
async fn find(shared: &Shared, id: &str) -> Result<RunSummary, Failure> {
    summary(&*shared.store, id)
        .await?
        .ok_or_else(|| Failure::Missing(format!("no run `{id}` in this store")))
}

/// Checks a run id from a URL: not empty, not absurdly long.
fn check_id(id: &str) -> Result<(), Failure> {
    if id.is_empty() || id.len() > 1024 {
        return Err(Failure::Bad(format!(
            "a run id has 1 to 1024 bytes, not {}",
            id.len()
        )));
    }
    Ok(())
}

async fn run_page(
    State(shared): State<Arc<Shared>>,
    UrlPath(id): UrlPath<String>,
    uri: Uri,
) -> Response {
    match run_body(&shared, &id, &uri).await {
        Ok(body) => html_page(&shared, &format!("Run {id}"), &body),
        Err(error) => failure(&shared, error),
    }
}

async fn run_body(shared: &Shared, id: &str, uri: &Uri) -> Result<String, Failure> {
    let query = params(uri, &["notice"])?;
    check_id(id)?;
    let run = find(shared, id).await?;
    let live = live_html(shared, &run).await?;
    let mut body = String::new();
    if let Some(text) = query.get("notice") {
        let _ = write!(body, r#"<p class="notice" id="notice">{}</p>"#, esc(text));
    }
    let _ = write!(
        body,
        r#"<h1>Run <code>{}</code></h1><div id="live" data-run="{}" data-next="{}" data-key="{}" data-finished="{}">{live}</div>"#,
        esc(id),
        esc(&format!("{}/runs/{}/live", shared.base, url(id))),
        run.next_seq,
        esc(&live_key(shared, &run).await?),
        run.status.is_finished(),
    );
    body.push_str(&actions_html(shared, &run));
    Ok(body)
}

/// The part of a run's page that changes while it runs: its summary, error, graph,
/// timeline, steps, instances, compensations, signals, input and result, and events.
async fn live_html(shared: &Shared, run: &RunSummary) -> Result<String, Failure> {
    let id = run.id.as_str();
    let store = &*shared.store;
    let events = store.events(id, 0).await?;
    let run_data = store.run_data(id).await?;
    let mut signals = store.signals(id, 0).await?;
    let signals_hidden = signals.len().saturating_sub(SIGNALS_SHOWN);
    signals.drain(..signals_hidden);
    let nodes = match store.nodes(id).await {
        Ok(rows) if !rows.is_empty() => Some(rows),
        Ok(_) | Err(StoreError::Unsupported { .. }) => shared
            .workflows
            .get(run.workflow.as_str())
            .map(|k| k.rows.clone()),
        Err(error) => return Err(error.into()),
    };
    // Child runs are started by `Workflow` steps, at the top or in a nest's body: a run whose
    // graph has neither has none, and its page does not look for them.
    let may_have_children = nodes.as_ref().is_none_or(|rows| {
        rows.iter()
            .any(|n| matches!(n.kind.as_str(), "" | "workflow" | "foreach" | "loop"))
    });
    let children: Vec<RunSummary> = if !may_have_children {
        Vec::new()
    } else {
        store
            .list_runs(&RunFilter {
                id_contains: Some(format!("{id}/")),
                // A child is created after its parent: the index from there on.
                created_from_ms: Some(run.created_ms),
                limit: Some(CHILDREN_SHOWN),
                ..RunFilter::default()
            })
            .await?
            .into_iter()
            .filter(|child| child.id.starts_with(&format!("{id}/")))
            .collect()
    };
    let (parent, generation) = lineage(&run_data.options);
    let Projected {
        input,
        outputs,
        result,
        error,
        steps,
        undo,
    } = project(&events, run_data);
    let base = &shared.base;
    let mut out = String::new();

    // The summary.
    let ended = run.status.is_finished().then_some(run.updated_ms);
    let _ = write!(
        out,
        r#"<dl class="summary"><dt>workflow</dt><dd><a href="{base}/workflows/{wlink}">{workflow}</a></dd><dt>status</dt><dd><span id="status" class="status s-{slug}" data-status="{status}">{status}</span></dd><dt>started</dt><dd>{started}</dd><dt>{updated_name}</dt><dd>{updated}</dd><dt>duration</dt><dd>{took}</dd><dt>events</dt><dd>{events}</dd>"#,
        wlink = url(&run.workflow),
        workflow = esc(&run.workflow),
        slug = svg::run_slug(run.status.as_str()),
        status = run.status.as_str(),
        started = utc(run.created_ms),
        updated_name = if ended.is_some() { "ended" } else { "updated" },
        updated = utc(run.updated_ms),
        took = duration_text(ended.unwrap_or_else(now_ms).saturating_sub(run.created_ms)),
        events = run.next_seq,
    );
    if let Some(owner) = &run.owner {
        let _ = write!(out, "<dt>held by</dt><dd><code>{}</code></dd>", esc(owner));
    }
    if let Some(wake) = run.wake_at_ms {
        let _ = write!(out, "<dt>due</dt><dd>{}</dd>", utc(wake));
    }
    if let Some(parent) = &parent {
        let _ = write!(
            out,
            r#"<dt>parent</dt><dd><a href="{base}/runs/{}">{}</a></dd>"#,
            url(parent),
            esc(parent)
        );
    }
    if generation > 1 {
        let _ = write!(out, "<dt>generation</dt><dd>{generation}</dd>");
    }
    out.push_str("</dl>");
    if let Some(error) = &error {
        let _ = write!(
            out,
            r#"<div class="error" id="run-error">{}</div>"#,
            html::text(error, None)
        );
    }

    // The graph.
    let mut status: HashMap<&str, &'static str> = HashMap::new();
    let kinds: HashMap<&str, &str> = nodes
        .iter()
        .flatten()
        .map(|n| (n.name.as_str(), n.kind.as_str()))
        .collect();
    for step in steps.iter().filter(|s| !s.nested) {
        let mut slug = svg::slug(step.status);
        if slug == "running" && kinds.get(step.name.as_str()) == Some(&"signal") {
            slug = "waiting";
        }
        status.insert(step.name.as_str(), slug);
    }
    out.push_str(r#"<section id="graph"><h2>Graph</h2>"#);
    match &nodes {
        Some(rows) => out.push_str(&svg::graph(rows, &status)),
        None => out.push_str(
            r#"<p class="empty">This store does not keep the run's graph, and this view does not know its workflow: register it (<code>View::register</code>, <code>Cli::register</code>) to draw it.</p>"#,
        ),
    }
    out.push_str(&legend());
    out.push_str("</section>");

    // The timeline.
    out.push_str(r#"<section id="timeline"><h2>Timeline</h2>"#);
    out.push_str(&svg::timeline(run, &events, &children));
    out.push_str("</section>");

    // The steps, with their outputs.
    let mut output_of: HashMap<String, Vec<u8>> = HashMap::new();
    let mut instances: Vec<(String, Vec<u8>)> = Vec::new();
    let places = crate::output_places(&events, &steps, &outputs);
    for (output, place) in outputs.into_iter().zip(places) {
        match place {
            crate::OutputOf::Step(i) => {
                output_of.insert(steps[i].name.clone(), output.bytes);
            }
            crate::OutputOf::Other(name) => instances.push((name, output.bytes)),
        }
    }
    out.push_str(r#"<section id="steps"><h2>Steps</h2><table class="steps"><thead><tr><th>step</th><th>status</th><th>attempts</th><th>error</th><th>output</th></tr></thead><tbody>"#);
    let nested_rows = steps.iter().filter(|s| s.nested).count();
    let mut nested_shown = 0;
    for step in &steps {
        // The run's own steps all; of the steps of nest instances, the first [`ROWS`].
        if step.nested {
            nested_shown += 1;
            if nested_shown > ROWS {
                continue;
            }
        }
        out.push_str(&step_row(
            shared,
            run,
            step,
            &status,
            output_of.get(&step.name),
        ));
    }
    out.push_str("</tbody></table>");
    if nested_rows > ROWS {
        let _ = write!(
            out,
            r#"<p class="note">{} more steps of nest instances are not listed (<code>flow show --json</code> prints them all).</p>"#,
            thousands(nested_rows - ROWS)
        );
    }
    out.push_str("</section>");

    if !instances.is_empty() {
        out.push_str(r#"<section id="instances"><h2>Nest instances</h2><table><thead><tr><th>instance</th><th>end</th></tr></thead><tbody>"#);
        for (name, value) in instances.iter().take(ROWS) {
            let _ = write!(
                out,
                r#"<tr data-instance="{}"><td><code>{}</code></td><td>{}</td></tr>"#,
                esc(name),
                esc(name),
                shown_value(value, None)
            );
        }
        out.push_str("</tbody></table>");
        if instances.len() > ROWS {
            let _ = write!(
                out,
                r#"<p class="note">{} more instances are not listed.</p>"#,
                thousands(instances.len() - ROWS)
            );
        }
        out.push_str("</section>");
    }

    if !undo.is_empty() {
        out.push_str(r#"<section id="compensations"><h2>Compensations</h2><table><thead><tr><th>of step</th><th>status</th><th>attempts</th><th>error</th></tr></thead><tbody>"#);
        for u in &undo {
            let _ = write!(
                out,
                r#"<tr data-status="{slug}"><td><code>{}</code></td><td><span class="status s-{slug}">{}</span></td><td>{}</td><td>{}</td></tr>"#,
                esc(&u.step),
                u.status,
                u.attempts,
                u.error
                    .as_deref()
                    .map_or_else(String::new, |e| html::text(e, None)),
                slug = svg::slug(u.status),
            );
        }
        out.push_str("</tbody></table></section>");
    }

    // Signals: those the run's steps wait for, and those received.
    out.push_str(r#"<section id="signals"><h2>Signals</h2>"#);
    let waiting: Vec<&str> = status
        .iter()
        .filter(|(name, slug)| **slug == "waiting" && kinds.get(*name) == Some(&"signal"))
        .map(|(name, _)| *name)
        .collect();
    if waiting.is_empty() {
        out.push_str(r#"<p class="empty">No step waits for a signal.</p>"#);
    } else {
        let mut names: Vec<String> = waiting
            .iter()
            .map(|n| format!("<code>{}</code>", esc(n)))
            .collect();
        names.sort();
        let _ = write!(out, r#"<p id="waiting">Waiting: {}</p>"#, names.join(", "));
    }
    if !signals.is_empty() {
        out.push_str(r#"<table><thead><tr><th>id</th><th>signal</th><th>payload</th><th>mode</th><th>sent</th><th>note</th></tr></thead><tbody>"#);
        for signal in &signals {
            out.push_str(&signal_row(shared, run, signal));
        }
        out.push_str("</tbody></table>");
        if signals_hidden > 0 {
            let _ = write!(
                out,
                r#"<p class="note">{} older signals are not listed.</p>"#,
                thousands(signals_hidden)
            );
        }
    }
    out.push_str("</section>");

    // Input and result.
    out.push_str(r#"<section id="values"><h2>Input and result</h2><dl>"#);
    let _ = write!(
        out,
        "<dt>input</dt><dd>{}</dd>",
        shown_value(&input, Some(&value_href(shared, run, "input")))
    );
    if let Some(result) = &result {
        let _ = write!(
            out,
            r#"<dt>result</dt><dd id="result">{}</dd>"#,
            shown_value(result, Some(&value_href(shared, run, "result")))
        );
    }
    out.push_str("</dl></section>");

    // The journal.
    let skipped = events.len().saturating_sub(EVENTS_SHOWN);
    let _ = write!(
        out,
        r#"<section id="events"><h2>Events</h2><details{}><summary>{} events</summary>"#,
        if run.status.is_finished() {
            ""
        } else {
            " open"
        },
        thousands(events.len())
    );
    if skipped > 0 {
        let _ = write!(
            out,
            "<p>The first {} events are not shown here (<code>flow show --json</code> prints them all).</p>",
            thousands(skipped)
        );
    }
    out.push_str(r#"<table class="events"><thead><tr><th>#</th><th>at</th><th>step</th><th>event</th><th>attempt</th><th>detail</th></tr></thead><tbody>"#);
    for event in &events[skipped..] {
        out.push_str(&event_row(event));
    }
    out.push_str("</tbody></table></details></section>");
    Ok(out)
}

fn legend() -> String {
    let mut out = String::from(r#"<p class="legend">"#);
    for slug in [
        "pending",
        "running",
        "waiting",
        "backoff",
        "completed",
        "failed",
        "timed-out",
        "aborted",
        "skipped",
        "withdrawn",
    ] {
        let _ = write!(out, r#"<span class="status s-{slug}">{slug}</span> "#);
    }
    out.push_str("</p>");
    out
}

fn value_href(shared: &Shared, run: &RunSummary, what: &str) -> String {
    format!(
        "{}/runs/{}/value?of={}",
        shared.base,
        url(&run.id),
        url(what)
    )
}

/// A stored value (JSON when flow wrote it) as a page shows it ([`html::value`]).
fn shown_value(bytes: &[u8], whole: Option<&str>) -> String {
    if bytes.is_empty() {
        return r#"<span class="empty">none</span>"#.to_owned();
    }
    let text = String::from_utf8_lossy(bytes);
    html::value(&text, whole)
}

fn step_row(
    shared: &Shared,
    run: &RunSummary,
    step: &Step,
    status: &HashMap<&str, &'static str>,
    output: Option<&Vec<u8>>,
) -> String {
    let slug = status
        .get(step.name.as_str())
        .copied()
        .unwrap_or_else(|| svg::slug(step.status));
    let shown = if slug == "waiting" && step.status == "running" {
        "waiting (signal)"
    } else {
        step.status
    };
    format!(
        r#"<tr data-step="{name}" data-status="{slug}" class="{nested}"><td><code>{name}</code></td><td><span class="status s-{slug}">{shown}</span></td><td>{attempts}</td><td>{error}</td><td>{output}</td></tr>"#,
        name = esc(&step.name),
        nested = if step.nested { "nested" } else { "" },
        attempts = step.attempts,
        error = step
            .error
            .as_deref()
            .map_or_else(String::new, |e| html::text(e, None)),
        output = output.map_or_else(String::new, |bytes| shown_value(
            bytes,
            Some(&value_href(shared, run, &format!("step:{}", step.name)))
        )),
    )
}

fn signal_row(shared: &Shared, run: &RunSummary, signal: &StoredSignal) -> String {
    let check = shared.workflows.get(run.workflow.as_str()).map(|k| k.check);
    let note = signal_note(run, signal, check);
    format!(
        r#"<tr data-signal="{name}"><td>{id}</td><td><code>{name}</code></td><td>{payload}</td><td>{mode}</td><td>{sent}</td><td>{note}</td></tr>"#,
        id = signal.id,
        name = esc(&signal.name),
        payload = html::short(&String::from_utf8_lossy(&signal.payload)),
        mode = signal.mode.as_str(),
        sent = utc(signal.sent_ms),
        note = note.as_deref().map_or_else(String::new, esc),
    )
}

fn event_row(event: &StoredEvent) -> String {
    let step = step_name(event).unwrap_or_default();
    format!(
        r#"<tr data-seq="{seq}" data-kind="{kind}"><td>{seq}</td><td>{at:.3} ms</td><td><code>{step}</code></td><td>{kind}</td><td>{attempt}</td><td>{detail}</td></tr>"#,
        seq = event.seq,
        at = event.at_us as f64 / 1000.0,
        step = esc(&step),
        kind = esc(&event.kind),
        attempt = if event.node.is_some() {
            event.attempt.to_string()
        } else {
            String::new()
        },
        detail = html::short(&detail(event)),
    )
}

/// The forms of a run's page: signals, cancel and redrive when actions are on, else a note.
fn actions_html(shared: &Shared, run: &RunSummary) -> String {
    let mut out = String::from(r#"<section id="actions"><h2>Actions</h2>"#);
    if !shared.actions {
        out.push_str(r#"<p class="readonly">This view is read-only: start it with <code>--allow-actions</code> (<code>View::allow_actions</code>) to send signals, cancel and redrive runs.</p></section>"#);
        return out;
    }
    let base = &shared.base;
    let link = url(&run.id);
    let token = &shared.token;
    let finished = run.status.is_finished();
    if !finished {
        match shared.workflows.get(run.workflow.as_str()) {
            Some(known) if !known.signals.is_empty() => {
                for (name, input) in &known.signals {
                    let _ = write!(
                        out,
                        r#"<form class="signal" method="post" action="{base}/runs/{link}/signal" data-signal="{n}"><input type="hidden" name="token" value="{token}"><input type="hidden" name="name" value="{n}"><input type="hidden" name="input" value="{kind}"><span>signal <code>{n}</code></span> {field} <button type="submit">Send</button></form>"#,
                        n = esc(name),
                        kind = input.as_str(),
                        field = match input {
                            Input::Unit => String::new(),
                            Input::Bool => r#"<label><input type="checkbox" name="value" value="true"> true</label>"#.to_owned(),
                            Input::Text => r#"<input name="value" placeholder="text">"#.to_owned(),
                            Input::Integer => r#"<input type="number" step="1" name="value" required>"#.to_owned(),
                            Input::Float => r#"<input type="number" step="any" name="value" required>"#.to_owned(),
                            Input::Json => r#"<textarea name="value" rows="2" cols="40" placeholder="JSON" required></textarea>"#.to_owned(),
                        },
                    );
                }
            }
            Some(_) => out.push_str(r#"<p class="empty">The workflow declares no signal.</p>"#),
            None => {
                let _ = write!(
                    out,
                    r#"<form class="signal" method="post" action="{base}/runs/{link}/signal"><input type="hidden" name="token" value="{token}"><input type="hidden" name="input" value="json"><label>signal <input name="name" required></label> <label>payload <textarea name="value" rows="2" cols="40" placeholder="JSON" required></textarea></label> <button type="submit">Send</button><p class="note">This view does not know the workflow <code>{}</code>: neither the signal's name nor its payload's type is checked.</p></form>"#,
                    esc(&run.workflow)
                );
            }
        }
        let _ = write!(
            out,
            r#"<form class="cancel" method="post" action="{base}/runs/{link}/cancel"><input type="hidden" name="token" value="{token}"><label>reason <input name="reason"></label> <button type="submit" class="danger">Cancel run</button></form>"#
        );
    }
    if matches!(run.status, RunStatus::Failed | RunStatus::Cancelled) {
        let _ = write!(
            out,
            r#"<form class="redrive" method="post" action="{base}/runs/{link}/redrive"><input type="hidden" name="token" value="{token}"><button type="submit">Redrive run</button></form>"#
        );
    }
    if finished && !matches!(run.status, RunStatus::Failed | RunStatus::Cancelled) {
        out.push_str(r#"<p class="empty">The run has ended: nothing to do.</p>"#);
    }
    out.push_str("</section>");
    out
}

/// What a run's page shows besides its journal, as one string: its status, when it was last
/// updated, who holds it, when it is due, and its newest signal. A page whose key and event
/// count are the run's is up to date.
async fn live_key(shared: &Shared, run: &RunSummary) -> Result<String, Failure> {
    let newest_signal = shared
        .store
        .signals(&run.id, 0)
        .await?
        .last()
        .map_or(0, |s| s.id);
    Ok(format!(
        "{}.{}.{}.{}.{newest_signal}",
        run.status.as_str(),
        run.updated_ms,
        run.owner.as_deref().unwrap_or(""),
        run.wake_at_ms.unwrap_or(0),
    ))
}

/// `GET /runs/{id}/live?since=SEQ&key=KEY`: `{"unchanged":true}` while the run's journal
/// has no event from `since` on and its [`live_key`] is `key`, else its new state: `next`,
/// `key`, `status`, `finished`, the HTML of its page's changing part, and that of its actions
/// (which the page swaps in only when the status changed: a form being filled in stays).
async fn live(
    State(shared): State<Arc<Shared>>,
    UrlPath(id): UrlPath<String>,
    uri: Uri,
) -> Response {
    let answer = async {
        let query = params(&uri, &["since", "key"])?;
        check_id(&id)?;
        let since = match query.get("since") {
            Some(text) => text
                .parse::<u64>()
                .map_err(|_| Failure::Bad(format!("`since` is an event number, not `{text}`")))?,
            None => 0,
        };
        let run = find(&shared, &id).await?;
        let status = run.status.as_str();
        let key = live_key(&shared, &run).await?;
        if run.next_seq == since && query.get("key") == Some(&key) {
            return Ok(json!({ "unchanged": true, "finished": run.status.is_finished() }));
        }
        let html = live_html(&shared, &run).await?;
        Ok::<_, Failure>(json!({
            "next": run.next_seq,
            "key": key,
            "status": status,
            "finished": run.status.is_finished(),
            "html": html,
            "actions": actions_html(&shared, &run),
        }))
    };
    match answer.await {
        Ok(value) => (
            [(header::CONTENT_TYPE, "application/json")],
            value.to_string(),
        )
            .into_response(),
        Err(error) => {
            let (status, why) = match error {
                Failure::Bad(why) => (StatusCode::BAD_REQUEST, why),
                Failure::Missing(why) => (StatusCode::NOT_FOUND, why),
                Failure::Store(error) => (store_status(&error), error.to_string()),
                Failure::Refused(why) | Failure::Forbidden(why) => (StatusCode::CONFLICT, why),
            };
            (
                status,
                [(header::CONTENT_TYPE, "application/json")],
                json!({ "error": why }).to_string(),
            )
                .into_response()
        }
    }
}

/// `GET /runs/{id}/value?of=input|result|step:NAME`: one whole stored value, as text.
async fn value(
    State(shared): State<Arc<Shared>>,
    UrlPath(id): UrlPath<String>,
    uri: Uri,
) -> Response {
    let answer = async {
        let query = params(&uri, &["of"])?;
        check_id(&id)?;
        let of = query.get("of").ok_or_else(|| {
            Failure::Bad("`of` says which value: input, result or step:NAME".to_owned())
        })?;
        let run = find(&shared, &id).await?;
        let events = shared.store.events(&run.id, 0).await?;
        let data = shared.store.run_data(&run.id).await?;
        let bytes = match of.as_str() {
            "input" => Some(data.input),
            "result" => data.end.and_then(|end| end.result),
            other => {
                let step = other.strip_prefix("step:").ok_or_else(|| {
                    Failure::Bad(format!("`of` is input, result or step:NAME, not `{other}`"))
                })?;
                let Projected { steps, outputs, .. } = project(&events, data);
                let places = crate::output_places(&events, &steps, &outputs);
                outputs
                    .into_iter()
                    .zip(places)
                    .find_map(|(output, place)| match place {
                        crate::OutputOf::Step(i) if steps[i].name == step => Some(output.bytes),
                        _ => None,
                    })
            }
        };
        bytes.ok_or_else(|| Failure::Missing(format!("run `{id}` has no value `{of}`")))
    };
    match answer.await {
        Ok(bytes) => (
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            String::from_utf8_lossy(&bytes).into_owned(),
        )
            .into_response(),
        Err(error) => failure(&shared, error),
    }
}

// ---------------------------------------------------------------------------------------
// A workflow.

async fn workflow_page(
    State(shared): State<Arc<Shared>>,
    UrlPath(name): UrlPath<String>,
) -> Response {
    match workflow_body(&shared, &name).await {
        Ok(body) => html_page(&shared, &format!("Workflow {name}"), &body),
        Err(error) => failure(&shared, error),
    }
}

async fn workflow_body(shared: &Shared, name: &str) -> Result<String, Failure> {
    if name.is_empty() || name.len() > 1024 {
        return Err(Failure::Bad(
            "a workflow's name has 1 to 1024 bytes".to_owned(),
        ));
    }
    let newest = shared
        .store
        .list_runs(&RunFilter {
            workflow: Some(name.to_owned()),
            newest_first: true,
            limit: Some(1),
            ..RunFilter::default()
        })
        .await?;
    let (rows, from) = match shared.workflows.get(name) {
        Some(known) => (Some(known.rows.clone()), "this binary's".to_owned()),
        None => match newest.first() {
            Some(run) => match shared.store.nodes(&run.id).await {
                Ok(rows) if !rows.is_empty() => {
                    (Some(rows), format!("the newest run's (`{}`)", run.id))
                }
                Ok(_) | Err(StoreError::Unsupported { .. }) => (None, String::new()),
                Err(error) => return Err(error.into()),
            },
            None => {
                return Err(Failure::Missing(format!(
                    "no workflow `{name}`: this view does not know it and the store has no run of it"
                )));
            }
        },
    };
    let base = &shared.base;
    let mut out = format!(
        r#"<h1>Workflow <code>{}</code></h1><p><a id="runs-of" href="{base}/runs?workflow={}">its runs</a></p>"#,
        esc(name),
        url(name)
    );
    match rows {
        Some(rows) => {
            let _ = write!(out, r#"<section id="graph"><h2>Graph</h2><p class="note">The graph as {} (steps, predecessors, kinds, settings).</p>"#, esc(&from));
            out.push_str(&svg::graph(&rows, &HashMap::new()));
            out.push_str(r#"</section><section id="nodes"><h2>Steps</h2><table><thead><tr><th>#</th><th>step</th><th>kind</th><th>call</th><th>settings</th><th>after</th><th>undone by</th></tr></thead><tbody>"#);
            let names: HashMap<u32, &str> = rows.iter().map(|r| (r.node, r.name.as_str())).collect();
            for row in &rows {
                let preds: Vec<String> = row
                    .preds
                    .iter()
                    .map(|p| esc(names.get(p).copied().unwrap_or("?")))
                    .collect();
                let _ = write!(
                    out,
                    r#"<tr data-node="{name}"><td>{n}</td><td><code>{name}</code></td><td>{kind}</td><td><code>{label}</code></td><td>{policy}</td><td>{preds}</td><td><code>{undo}</code></td></tr>"#,
                    n = row.node,
                    name = esc(&row.name),
                    kind = esc(&row.kind),
                    label = esc(&row.label),
                    policy = esc(&row.policy),
                    preds = preds.join(", "),
                    undo = esc(&row.compensate),
                );
            }
            out.push_str("</tbody></table></section>");
        }
        None => out.push_str(r#"<p class="empty">Neither this view nor the store knows the workflow's graph: register the workflow (<code>View::register</code>) to draw it.</p>"#),
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------
// Actions.

/// Checks an action's request: this process's token, and no other origin.
fn allowed(
    shared: &Shared,
    headers: &HeaderMap,
    form: &HashMap<String, String>,
) -> Result<(), Failure> {
    let given = form.get("token").map_or(&[][..], |t| t.as_bytes());
    let same = given.len() == shared.token.len()
        && given
            .iter()
            .zip(shared.token.as_bytes())
            .fold(0u8, |diff, (a, b)| diff | (a ^ b))
            == 0;
    if !same {
        return Err(Failure::Forbidden(
            "the form does not carry this view's token: reload the run's page and send it again"
                .to_owned(),
        ));
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let host = headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or("");
        let origin = origin.to_str().unwrap_or("");
        let same = origin
            .split_once("://")
            .is_some_and(|(_, rest)| rest == host);
        if !same {
            return Err(Failure::Forbidden(format!(
                "a request from another origin (`{origin}`) is refused"
            )));
        }
    }
    Ok(())
}

/// The fields of a posted form, refusing a repeated or unknown field.
fn form(body: &[u8], known: &[&str]) -> Result<HashMap<String, String>, Failure> {
    let pairs: Vec<(String, String)> = serde_urlencoded::from_bytes(body)
        .map_err(|error| Failure::Bad(format!("the form cannot be read: {error}")))?;
    let mut out = HashMap::new();
    for (key, value) in pairs {
        if !known.contains(&key.as_str()) {
            return Err(Failure::Bad(format!("unknown field `{key}`")));
        }
        if out.insert(key.clone(), value).is_some() {
            return Err(Failure::Bad(format!("field `{key}` is given twice")));
        }
    }
    Ok(out)
}

/// The form of an action on run `id`: its `fields` (and the token), from this view's pages
/// ([`allowed`]).
fn action_form(
    shared: &Shared,
    id: &str,
    headers: &HeaderMap,
    body: &[u8],
    fields: &[&str],
) -> Result<HashMap<String, String>, Failure> {
    check_id(id)?;
    let mut known = vec!["token"];
    known.extend_from_slice(fields);
    let form = form(body, &known)?;
    allowed(shared, headers, &form)?;
    Ok(form)
}

/// The answer to an action: back to the run's page with its notice, or the failure's page.
fn answered(shared: &Shared, id: &str, answer: Result<String, Failure>) -> Response {
    match answer {
        Ok(notice) => back(shared, id, &notice),
        Err(error) => failure(shared, error),
    }
}

/// Where an action sends the browser: back to the run's page, with a notice.
fn back(shared: &Shared, id: &str, notice: &str) -> Response {
    // Short enough for the run's page to take it back (its query is at most `MAX_QUERY`).
    let notice = match notice.char_indices().nth(300) {
        Some((cut, _)) => format!("{}…", &notice[..cut]),
        None => notice.to_owned(),
    };
    Redirect::to(&format!(
        "{}/runs/{}?notice={}",
        shared.base,
        url(id),
        url(&notice)
    ))
    .into_response()
}

/// `POST /runs/{id}/signal`: `name`, `input` (how `value` reads: `bool`, `text`, `integer`,
/// `float`, `unit`, `json`) and `value`; checked as `flow signal` checks it, then stored.
async fn signal(
    State(shared): State<Arc<Shared>>,
    UrlPath(id): UrlPath<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let answer = async {
        let form = action_form(&shared, &id, &headers, &body, &["name", "input", "value"])?;
        let name = form
            .get("name")
            .filter(|n| !n.is_empty())
            .ok_or_else(|| Failure::Bad("the signal's `name` is missing".to_owned()))?;
        if name.len() > MAX_NAME {
            return Err(Failure::Bad(format!(
                "a signal's name has at most {MAX_NAME} bytes, not {}",
                name.len()
            )));
        }
        let input = form
            .get("input")
            .and_then(|i| Input::parse(i))
            .unwrap_or(Input::Json);
        let raw = form.get("value").map_or("", String::as_str);
        let payload: Value = match input {
            Input::Unit => Value::Null,
            Input::Bool => Value::Bool(raw == "true"),
            Input::Text => Value::String(raw.to_owned()),
            Input::Integer | Input::Float | Input::Json => {
                serde_json::from_str(raw).map_err(|error| {
                    Failure::Bad(format!("the payload of `{name}` is not JSON: {error}"))
                })?
            }
        };
        let run = find(&shared, &id).await?;
        let bytes = payload.to_string().into_bytes();
        let check = shared.workflows.get(run.workflow.as_str()).map(|k| k.check);
        let mode = signal_mode(&run, name, &bytes, check).map_err(|refusal| match refusal {
            SignalRefusal::Ended => Failure::Refused(format!(
                "run `{id}` has ended ({}): no step will take a signal",
                run.status
            )),
            SignalRefusal::Reserved => Failure::Bad(format!(
                "names that start with `{}` are an operator's requests: use the cancel button",
                flowdag_runtime::store::requests::PREFIX
            )),
            SignalRefusal::Refused(why) => {
                Failure::Bad(format!("signal `{name}` refused, nothing stored: {why}"))
            }
        })?;
        let checked = check.is_some();
        let sent = shared
            .store
            .send_signal(NewSignal {
                run: id.clone(),
                name: name.clone(),
                payload: bytes,
                mode,
            })
            .await?;
        let mut notice = match sent {
            SignalSent::Stored { id: signal } => format!("signal `{name}` stored (id {signal})"),
            SignalSent::Dropped => format!("signal `{name}` dropped: no step waits for it"),
        };
        if !checked {
            notice.push_str(" (not checked: this view does not know the workflow)");
        }
        Ok::<_, Failure>(notice)
    };
    answered(&shared, &id, answer.await)
}

/// `POST /runs/{id}/cancel`: `reason`; as `flow cancel`, through [`cancel_run`].
async fn cancel(
    State(shared): State<Arc<Shared>>,
    UrlPath(id): UrlPath<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let answer = async {
        let form = action_form(&shared, &id, &headers, &body, &["reason"])?;
        find(&shared, &id).await?;
        let reason = form
            .get("reason")
            .map(String::as_str)
            .filter(|r| !r.is_empty());
        let stop = cancel_run(&*shared.store, &id, reason).await?;
        Ok::<_, Failure>(match stop {
            Stop::Requested { holder: Some(holder) } => {
                format!("cancel requested: `{holder}`, which holds the run, cancels it")
            }
            Stop::Requested { holder: None } => "cancel requested: nobody holds the run; the next worker that loads it cancels it and runs its compensations".to_owned(),
            Stop::Ended => "the run is cancelled".to_owned(),
            _ => "cancel requested".to_owned(),
        })
    };
    answered(&shared, &id, answer.await)
}

/// `POST /runs/{id}/redrive`: as `flow redrive`, through [`redrive_run`].
async fn redrive(
    State(shared): State<Arc<Shared>>,
    UrlPath(id): UrlPath<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let answer = async {
        action_form(&shared, &id, &headers, &body, &[])?;
        find(&shared, &id).await?;
        let redriven = redrive_run(&*shared.store, &id).await?;
        Ok::<_, Failure>(format!(
            "run redriven from event #{}: {} failed step(s) get a new attempt; a worker picks it up",
            redriven.from,
            redriven.failed.len()
        ))
    };
    answered(&shared, &id, answer.await)
}
