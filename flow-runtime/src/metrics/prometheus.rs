//! The Prometheus recorder (feature `prometheus`), and the `GET /metrics` endpoint a worker
//! serves: a small HTTP/1.1 responder on `tokio::net`, one request per connection.

use std::fmt;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::OnceLock;
use std::task::{Context, Poll};
use std::time::Duration;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::{
    ATTEMPTS, DECISION_LATENCY, QUEUE_LAG, RUNS_FINISHED, RUNS_IN_FLIGHT, RUNS_STARTED,
    STEP_DURATION, STORE_RETRIES, TASKS_CLAIMED, TASKS_IN_FLIGHT, TASKS_LOST,
};

/// Why the Prometheus recorder could not be installed, or its endpoint not served.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum MetricsError {
    /// Another recorder was installed as the `metrics` facade's global recorder before
    /// [`Prometheus::install`] was first called: there can be only one.
    OtherRecorder,
    /// The endpoint's address could not be bound (taken, not local, no permission).
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The system's error.
        why: String,
    },
}

impl fmt::Display for MetricsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MetricsError::OtherRecorder => f.write_str(
                "another `metrics` recorder is installed: the Prometheus recorder cannot be",
            ),
            MetricsError::Bind { addr, why } => {
                write!(f, "the metrics endpoint cannot listen on {addr}: {why}")
            }
        }
    }
}

impl std::error::Error for MetricsError {}

/// The buckets of the histograms, in seconds: from a millisecond to an hour.
const BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0,
    3600.0,
];

/// The recorder installed by [`Prometheus::install`], or why it could not be.
static INSTALLED: OnceLock<Result<Prometheus, MetricsError>> = OnceLock::new();

/// The process's Prometheus recorder: installed once as the `metrics` facade's global
/// recorder, it collects every metric of the process (flow's and the application's own) and
/// renders them in Prometheus's text format. Cloning it is cheap; every clone renders the same.
///
/// ```
/// let prometheus = flowdag_runtime::metrics::Prometheus::install()?;
/// // ... serve `prometheus.render()` at `GET /metrics`, or let a `Worker` do it.
/// assert!(prometheus.render().is_ascii());
/// # Ok::<(), flowdag_runtime::metrics::MetricsError>(())
/// ```
#[derive(Clone)]
pub struct Prometheus {
    handle: PrometheusHandle,
}

impl Prometheus {
    /// Installs the Prometheus recorder as the global recorder of the `metrics` facade, once
    /// per process: a second call returns the same recorder. Its histograms have buckets from
    /// 1 ms to 1 h; the metrics of flow are described (their `# HELP` lines).
    ///
    /// # Errors
    ///
    /// [`MetricsError::OtherRecorder`]: another recorder was installed first (then every call
    /// says so).
    pub fn install() -> Result<Prometheus, MetricsError> {
        INSTALLED
            .get_or_init(|| {
                let recorder = builder().build_recorder();
                let handle = recorder.handle();
                metrics::set_global_recorder(recorder).map_err(|_| MetricsError::OtherRecorder)?;
                describe();
                Ok(Prometheus { handle })
            })
            .clone()
    }

    /// A recorder of its own, not installed: for tests, with [`metrics::with_local_recorder`].
    #[cfg(test)]
    pub(crate) fn local() -> (metrics_exporter_prometheus::PrometheusRecorder, Prometheus) {
        let recorder = builder().build_recorder();
        let handle = recorder.handle();
        (recorder, Prometheus { handle })
    }

    /// Every metric recorded so far, in Prometheus's text exposition format (version 0.0.4).
    /// Runs the recorder's upkeep first (its histograms drain what was recorded since).
    pub fn render(&self) -> String {
        self.handle.run_upkeep();
        self.handle.render()
    }
}

impl fmt::Debug for Prometheus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Prometheus").finish_non_exhaustive()
    }
}

fn builder() -> PrometheusBuilder {
    // `BUCKETS` is not empty: the only error `set_buckets` has.
    let with_buckets = PrometheusBuilder::new().set_buckets(BUCKETS);
    with_buckets.unwrap_or_else(|_| PrometheusBuilder::new())
}

/// Describes flow's metrics to the installed recorder (their units and help texts).
fn describe() {
    use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    describe_counter!(RUNS_STARTED, "Durable runs created by this process.");
    describe_counter!(
        RUNS_FINISHED,
        "Durable runs whose end this process committed."
    );
    describe_counter!(ATTEMPTS, "Attempts of steps that ended, by outcome.");
    describe_counter!(
        TASKS_CLAIMED,
        "Tasks of distributed runs claimed by a worker."
    );
    describe_counter!(TASKS_LOST, "Tasks whose claim a worker lost.");
    describe_counter!(
        STORE_RETRIES,
        "Store requests retried after a retryable error."
    );
    describe_histogram!(
        STEP_DURATION,
        Unit::Seconds,
        "Duration of each attempt that ended."
    );
    describe_histogram!(
        DECISION_LATENCY,
        Unit::Seconds,
        "From the first event of a journal batch to its commit."
    );
    describe_histogram!(
        QUEUE_LAG,
        Unit::Seconds,
        "From due to picked up by a worker."
    );
    describe_gauge!(
        RUNS_IN_FLIGHT,
        "Durable runs held in memory by this process."
    );
    describe_gauge!(
        TASKS_IN_FLIGHT,
        "Tasks executed by a worker of this process."
    );
}

/// The address a worker serves its metrics on: bound when it is set, served while the worker
/// runs.
#[derive(Default)]
pub(crate) struct Listener(Option<(std::net::TcpListener, Prometheus)>);

impl Listener {
    /// Installs the recorder and binds `addr`.
    pub(crate) fn bind(addr: SocketAddr) -> Result<Listener, MetricsError> {
        let prometheus = Prometheus::install()?;
        let bind = |addr| {
            let listener = std::net::TcpListener::bind(addr)?;
            listener.set_nonblocking(true)?;
            Ok::<_, std::io::Error>(listener)
        };
        let listener = bind(addr).map_err(|error| MetricsError::Bind {
            addr,
            why: error.to_string(),
        })?;
        Ok(Listener(Some((listener, prometheus))))
    }

    /// The address bound, if any.
    pub(crate) fn local_addr(&self) -> Option<SocketAddr> {
        self.0
            .as_ref()
            .and_then(|(listener, _)| listener.local_addr().ok())
    }

    /// The endpoint to poll while the worker runs (in a tokio runtime with I/O enabled);
    /// `None` without an address, or when the socket cannot be registered.
    pub(crate) fn serve(&self) -> Option<Endpoint> {
        let (listener, prometheus) = self.0.as_ref()?;
        let listener = listener.try_clone().ok()?;
        // Outside a tokio runtime with I/O enabled, registering the socket panics: the worker
        // then goes on without its endpoint (the panic's message says why).
        let registered = std::panic::catch_unwind(|| tokio::net::TcpListener::from_std(listener));
        let Ok(Ok(listener)) = registered else {
            #[cfg(feature = "tracing")]
            tracing::warn!("the metrics endpoint is not served: no tokio runtime with I/O enabled");
            return None;
        };
        #[cfg(feature = "tracing")]
        if let Ok(addr) = listener.local_addr() {
            tracing::info!(%addr, "serving metrics at http://{addr}/metrics");
        }
        Some(Endpoint {
            listener,
            prometheus: prometheus.clone(),
            connections: Vec::new(),
        })
    }
}

/// The most connections an endpoint answers at once; more wait to be accepted.
const MAX_CONNECTIONS: usize = 16;

/// The largest request head an endpoint reads; a longer one gets `400`.
const MAX_REQUEST: usize = 8 * 1024;

/// How long an endpoint waits for a request's head, and for its answer to be taken.
const IO_TIMEOUT: Duration = Duration::from_secs(5);

/// A worker's `GET /metrics` endpoint: polled by the worker's loop beside its runs, it spawns
/// nothing.
pub(crate) struct Endpoint {
    listener: tokio::net::TcpListener,
    prometheus: Prometheus,
    connections: Vec<Pin<Box<dyn Future<Output = ()>>>>,
}

impl Endpoint {
    /// Answers what can be answered now, accepts new connections; registers `cx` for more.
    pub(crate) fn poll(&mut self, cx: &mut Context<'_>) {
        self.connections
            .retain_mut(|connection| connection.as_mut().poll(cx).is_pending());
        while self.connections.len() < MAX_CONNECTIONS {
            match self.listener.poll_accept(cx) {
                Poll::Ready(Ok((stream, _))) => {
                    let mut connection: Pin<Box<dyn Future<Output = ()>>> =
                        Box::pin(answer(stream, self.prometheus.clone()));
                    if connection.as_mut().poll(cx).is_pending() {
                        self.connections.push(connection);
                    }
                }
                // A failed accept (out of file descriptors, a connection reset before it was
                // taken) is tried again at the next poll.
                Poll::Ready(Err(_)) | Poll::Pending => break,
            }
        }
    }
}

/// Reads one request from `stream` and answers it; the connection is then closed.
async fn answer(mut stream: TcpStream, prometheus: Prometheus) {
    let head = tokio::time::timeout(IO_TIMEOUT, read_head(&mut stream)).await;
    let response = match head {
        Ok(Ok(head)) => respond(&head, &prometheus),
        Ok(Err(Refused::TooLarge)) => plain(400, "Bad Request", "request too large\n"),
        // The client went away, or never sent a whole head: nothing to answer.
        Ok(Err(Refused::Closed)) | Err(_) => return,
    };
    let write = async {
        stream.write_all(&response).await?;
        stream.shutdown().await
    };
    let _ = tokio::time::timeout(IO_TIMEOUT, write).await;
}

/// Why a request's head was not read.
enum Refused {
    TooLarge,
    Closed,
}

/// Reads a request's head: up to and with the empty line that ends it.
async fn read_head(stream: &mut TcpStream) -> Result<Vec<u8>, Refused> {
    let mut head = Vec::with_capacity(512);
    let mut chunk = [0u8; 1024];
    loop {
        let read = stream.read(&mut chunk).await.map_err(|_| Refused::Closed)?;
        if read == 0 {
            return Err(Refused::Closed);
        }
        let from = head.len().saturating_sub(3);
        head.extend_from_slice(&chunk[..read]);
        if let Some(at) = head[from..].windows(4).position(|w| w == b"\r\n\r\n") {
            head.truncate(from + at);
            return Ok(head);
        }
        if head.len() > MAX_REQUEST {
            return Err(Refused::TooLarge);
        }
    }
}

/// The response to a request whose head is `head`.
pub(crate) fn respond(head: &[u8], prometheus: &Prometheus) -> Vec<u8> {
    let Ok(head) = std::str::from_utf8(head) else {
        return plain(400, "Bad Request", "request is not UTF-8\n");
    };
    let line = head.split("\r\n").next().unwrap_or("");
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return plain(400, "Bad Request", "malformed request line\n");
    };
    if !version.starts_with("HTTP/1.") || method.is_empty() || !target.starts_with('/') {
        return plain(400, "Bad Request", "malformed request line\n");
    }
    let path = target.split('?').next().unwrap_or(target);
    if path != "/metrics" {
        return plain(404, "Not Found", "not found: the metrics are at /metrics\n");
    }
    match method {
        "GET" | "HEAD" => {
            let body = prometheus.render();
            let mut response = header(
                200,
                "OK",
                "text/plain; version=0.0.4; charset=utf-8",
                body.len(),
                "",
            );
            if method == "GET" {
                response.extend_from_slice(body.as_bytes());
            }
            response
        }
        _ => {
            let body = "method not allowed: GET /metrics\n";
            let mut response = header(
                405,
                "Method Not Allowed",
                "text/plain; charset=utf-8",
                body.len(),
                "Allow: GET, HEAD\r\n",
            );
            response.extend_from_slice(body.as_bytes());
            response
        }
    }
}

/// A response with a plain-text body.
fn plain(status: u16, reason: &str, body: &str) -> Vec<u8> {
    let mut response = header(status, reason, "text/plain; charset=utf-8", body.len(), "");
    response.extend_from_slice(body.as_bytes());
    response
}

/// A response's head; `extra` holds more header lines, each ended by `\r\n`.
fn header(status: u16, reason: &str, content_type: &str, length: usize, extra: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {length}\r\n{extra}Connection: close\r\n\r\n"
    )
    .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(response: &[u8]) -> String {
        let text = String::from_utf8_lossy(response);
        text.split("\r\n").next().unwrap_or("").to_owned()
    }

    #[test]
    fn requests_are_answered_by_what_they_ask() {
        let (recorder, prometheus) = Prometheus::local();
        metrics::with_local_recorder(&recorder, || {
            metrics::counter!(RUNS_STARTED, "workflow" => "W").increment(1);
        });
        let ok = respond(b"GET /metrics HTTP/1.1\r\nHost: x", &prometheus);
        assert_eq!(status(&ok), "HTTP/1.1 200 OK");
        let text = String::from_utf8_lossy(&ok);
        assert!(text.contains("text/plain; version=0.0.4"), "{text}");
        assert!(
            text.contains("flow_runs_started_total{workflow=\"W\"} 1"),
            "{text}"
        );
        let query = respond(b"GET /metrics?x=1 HTTP/1.0", &prometheus);
        assert_eq!(status(&query), "HTTP/1.1 200 OK");
        let head = respond(b"HEAD /metrics HTTP/1.1", &prometheus);
        assert!(String::from_utf8_lossy(&head).ends_with("\r\n\r\n"));
        let cases: [(&[u8], &str); 7] = [
            (b"GET / HTTP/1.1", "HTTP/1.1 404 Not Found"),
            (b"POST /metrics HTTP/1.1", "HTTP/1.1 405 Method Not Allowed"),
            (b"GET /metrics", "HTTP/1.1 400 Bad Request"),
            (b"GET /metrics SPDY/3", "HTTP/1.1 400 Bad Request"),
            (b"GET  /metrics HTTP/1.1", "HTTP/1.1 400 Bad Request"),
            (b"\xff\xfe /metrics HTTP/1.1", "HTTP/1.1 400 Bad Request"),
            (b"", "HTTP/1.1 400 Bad Request"),
        ];
        for (request, expected) in cases {
            assert_eq!(status(&respond(request, &prometheus)), expected);
        }
    }

    #[test]
    fn another_recorder_installed_first_is_a_typed_error() {
        // The only test of this binary that installs a global recorder, or asks for one.
        let other = metrics_util::debugging::DebuggingRecorder::new();
        assert!(metrics::set_global_recorder(other).is_ok());
        for _ in 0..2 {
            assert_eq!(
                Prometheus::install().err(),
                Some(MetricsError::OtherRecorder)
            );
        }
    }

    #[test]
    fn an_endpoint_answers_over_tcp_and_refuses_a_huge_request() {
        let (_recorder, prometheus) = Prometheus::local();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            let std = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
            std.set_nonblocking(true).expect("nonblocking");
            let addr = std.local_addr().expect("addr");
            let mut endpoint = Endpoint {
                listener: tokio::net::TcpListener::from_std(std).expect("listener"),
                prometheus,
                connections: Vec::new(),
            };
            let serve = std::future::poll_fn(|cx| {
                endpoint.poll(cx);
                Poll::<()>::Pending
            });
            let client = async {
                let mut answers = Vec::new();
                // One byte more than an endpoint reads, without the head's end: read whole, refused.
                let huge = format!("GET /{}", "a".repeat(MAX_REQUEST - 4));
                for request in [
                    "GET /metrics HTTP/1.1\r\n\r\n",
                    "GET /nope HTTP/1.1\r\n\r\n",
                    &huge,
                ] {
                    let mut stream = TcpStream::connect(addr).await.expect("connect");
                    let _ = stream.write_all(request.as_bytes()).await;
                    let mut answer = Vec::new();
                    let _ = stream.read_to_end(&mut answer).await;
                    answers.push(status(&answer));
                }
                answers
            };
            let answers = tokio::select! {
                answers = client => answers,
                () = serve => unreachable!(),
            };
            assert_eq!(
                answers,
                [
                    "HTTP/1.1 200 OK",
                    "HTTP/1.1 404 Not Found",
                    "HTTP/1.1 400 Bad Request"
                ]
            );
        });
    }
}
