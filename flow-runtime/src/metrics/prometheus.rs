//! The Prometheus recorder (feature `prometheus`), and the `GET /metrics` endpoint a worker
//! serves: a small HTTP/1.1 responder on a thread of its own, one request per connection.

use std::fmt;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

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
                // The recorder keeps a histogram's samples until its upkeep drains them: run it
                // every few seconds, so a process nobody scrapes does not grow. (Best effort: a
                // process that cannot start a thread drains at each render.)
                let upkeep = handle.clone();
                let _ = std::thread::Builder::new()
                    .name("flow-metrics-upkeep".into())
                    .spawn(move || {
                        loop {
                            std::thread::sleep(UPKEEP_EVERY);
                            upkeep.run_upkeep();
                        }
                    });
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

/// How often the installed recorder's upkeep runs.
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

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
pub(crate) struct Listener(Option<(std::net::TcpListener, Prometheus)>);

impl Listener {
    /// No address: nothing served.
    pub(crate) fn none() -> Listener {
        Listener(None)
    }

    /// Installs the recorder and binds `addr`.
    pub(crate) fn bind(addr: SocketAddr) -> Result<Listener, MetricsError> {
        let prometheus = Prometheus::install()?;
        let listener = std::net::TcpListener::bind(addr).map_err(|error| MetricsError::Bind {
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

    /// Serves the endpoint on a thread of its own until the returned guard is dropped (when
    /// the worker's `run` ends); `None` without an address, or when the thread cannot start.
    /// A thread, not a task of the worker's runtime: a scrape never wakes the worker's runs,
    /// and the endpoint needs nothing of the runtime.
    pub(crate) fn serve(&self) -> Option<Endpoint> {
        let (listener, prometheus) = self.0.as_ref()?;
        let listener = listener.try_clone().ok()?;
        let addr = listener.local_addr().ok()?;
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (stop, prometheus) = (Arc::clone(&stop), prometheus.clone());
            std::thread::Builder::new()
                .name("flow-metrics".into())
                .spawn(move || accept(&listener, &prometheus, &stop))
                .ok()?
        };
        #[cfg(feature = "tracing")]
        tracing::info!(%addr, "serving metrics at http://{addr}/metrics");
        Some(Endpoint {
            addr,
            stop,
            thread: Some(thread),
        })
    }
}

/// How long an endpoint waits for a request's head, and for its answer to be taken.
const IO_TIMEOUT: Duration = Duration::from_secs(2);

/// The largest request head an endpoint reads; a longer one gets `400`.
const MAX_REQUEST: usize = 8 * 1024;

/// A worker's `GET /metrics` endpoint being served: dropping it stops the thread.
pub(crate) struct Endpoint {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the thread blocked in `accept`; it sees `stop` and returns.
        let _ = std::net::TcpStream::connect_timeout(&self.addr, IO_TIMEOUT);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Accepts connections one at a time and answers each, until `stop`.
fn accept(listener: &std::net::TcpListener, prometheus: &Prometheus, stop: &AtomicBool) {
    for stream in listener.incoming() {
        if stop.load(Ordering::SeqCst) {
            return;
        }
        // A failed accept (out of file descriptors, a connection reset before it was taken)
        // is left behind; the next one is tried.
        if let Ok(stream) = stream {
            answer(stream, prometheus);
        }
    }
}

/// Reads one request from `stream` and answers it; the connection is then closed. Every read
/// and write waits at most [`IO_TIMEOUT`], so a client that sends nothing holds the endpoint
/// that long at most.
fn answer(mut stream: std::net::TcpStream, prometheus: &Prometheus) {
    if stream.set_read_timeout(Some(IO_TIMEOUT)).is_err()
        || stream.set_write_timeout(Some(IO_TIMEOUT)).is_err()
    {
        return;
    }
    let response = match read_head(&mut stream) {
        Ok(head) => respond(&head, prometheus),
        Err(Refused::TooLarge) => plain(400, "Bad Request", "request too large\n"),
        // The client went away, or never sent a whole head: nothing to answer.
        Err(Refused::Closed) => return,
    };
    let _ = stream.write_all(&response);
    let _ = stream.shutdown(std::net::Shutdown::Write);
}

/// Why a request's head was not read.
enum Refused {
    TooLarge,
    Closed,
}

/// Reads a request's head: up to and with the empty line that ends it.
fn read_head(stream: &mut std::net::TcpStream) -> Result<Vec<u8>, Refused> {
    let deadline = std::time::Instant::now() + IO_TIMEOUT;
    let mut head = Vec::with_capacity(512);
    let mut chunk = [0u8; 1024];
    loop {
        if std::time::Instant::now() > deadline {
            return Err(Refused::Closed);
        }
        let read = stream.read(&mut chunk).map_err(|_| Refused::Closed)?;
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
        let std = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = std.local_addr().expect("addr");
        let listener = Listener(Some((std, prometheus)));
        let endpoint = listener.serve().expect("served");
        let ask = |request: &str| {
            let mut stream = std::net::TcpStream::connect(addr).expect("connect");
            let _ = stream.write_all(request.as_bytes());
            let mut answer = Vec::new();
            let _ = stream.read_to_end(&mut answer);
            status(&answer)
        };
        // One byte more than an endpoint reads, without the head's end: read whole, refused.
        let huge = format!("GET /{}", "a".repeat(MAX_REQUEST - 4));
        assert_eq!(ask("GET /metrics HTTP/1.1\r\n\r\n"), "HTTP/1.1 200 OK");
        assert_eq!(ask("GET /nope HTTP/1.1\r\n\r\n"), "HTTP/1.1 404 Not Found");
        assert_eq!(ask(&huge), "HTTP/1.1 400 Bad Request");
        // A client that sends nothing is dropped after the timeout; the next one is answered.
        let silent = std::net::TcpStream::connect(addr).expect("connect");
        assert_eq!(ask("GET /metrics HTTP/1.1\r\n\r\n"), "HTTP/1.1 200 OK");
        drop(silent);
        // Dropping the endpoint stops its thread: nothing answers any more.
        drop(endpoint);
        let mut late = std::net::TcpStream::connect(addr).expect("the socket is still bound");
        let _ = late.write_all(b"GET /metrics HTTP/1.1\r\n\r\n");
        late.set_read_timeout(Some(Duration::from_secs(1)))
            .expect("a timeout");
        let mut answer = Vec::new();
        let _ = late.read_to_end(&mut answer);
        assert!(answer.is_empty(), "{}", String::from_utf8_lossy(&answer));
    }
}
