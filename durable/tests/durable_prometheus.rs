//! The worker's Prometheus endpoint (`Worker::prometheus`, feature `prometheus`): it installs
//! the process's recorder, serves `GET /metrics` while the worker runs, and the scrape holds the
//! run the worker finished. A test binary of its own: the recorder is the process's.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use flowdag::Worker;
use flowdag::metrics::{MetricsError, Prometheus};
use flowdag::prelude::*;
use flowdag::store::{MemoryStore, RunFilter, RunStatus, Store};

#[derive(Debug)]
struct Never;

impl std::fmt::Display for Never {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("never")
    }
}

impl std::error::Error for Never {}

async fn fetch(order: u64) -> Result<u64, Never> {
    Ok(order + 1)
}

workflow! {
    #[flow(durable)]
    Scraped(order: u64) -> u64 {
        Sequential {
            Delay("10ms"),
            item = Operation(fetch(order)),
        }
        => item
    }
}

/// One request to `addr` over a blocking socket; the whole answer.
fn request(addr: SocketAddr, text: &str) -> String {
    let mut stream = TcpStream::connect(addr).expect("connects");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("a timeout");
    stream.write_all(text.as_bytes()).expect("writes");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("reads");
    answer
}

#[test]
fn a_worker_serves_its_metrics_to_prometheus() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    // Installed before the run is created, so that its start is counted too (the worker's
    // endpoint serves this same recorder).
    let first = Prometheus::install().expect("the recorder");
    let answers = runtime.block_on(async {
        let store = MemoryStore::new();
        let ended = Scraped::runner()
            .durable(&store, "scraped-1")
            .submit(1)
            .await
            .expect("submitted");
        assert!(ended.is_unloaded(), "{ended:?}");
        let worker = Worker::new(store.clone())
            .register::<Scraped>()
            .poll_interval(Duration::from_millis(5))
            .prometheus("127.0.0.1:0".parse().expect("an address"))
            .expect("the endpoint is bound");
        let addr = worker.metrics_addr().expect("its address");
        assert_ne!(addr.port(), 0);
        // Once the run has finished, a client on another thread scrapes the endpoint the
        // worker serves on this one; then the worker is shut down.
        let scrape = async {
            loop {
                tokio::time::sleep(Duration::from_millis(5)).await;
                let runs = store.list_runs(&RunFilter::default()).await.expect("lists");
                if runs.iter().all(|r| r.status == RunStatus::Succeeded) {
                    break;
                }
            }
            let client = std::thread::spawn(move || {
                [
                    request(addr, "GET /metrics HTTP/1.1\r\nHost: test\r\n\r\n"),
                    request(addr, "GET /other HTTP/1.1\r\n\r\n"),
                    request(addr, "DELETE /metrics HTTP/1.1\r\n\r\n"),
                    request(addr, "nonsense\r\n\r\n"),
                ]
            });
            while !client.is_finished() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            client.join().expect("the client")
        };
        let answers = std::cell::RefCell::new(None);
        let shutdown = async { *answers.borrow_mut() = Some(scrape.await) };
        // Not a threshold: a worker that never stops fails the test instead of hanging it.
        tokio::time::timeout(Duration::from_secs(30), worker.run(shutdown))
            .await
            .expect("the worker stops")
            .expect("the worker runs");
        answers.into_inner().expect("the scrape's answers")
    });
    let [metrics, other, delete, nonsense] = answers;
    assert!(metrics.starts_with("HTTP/1.1 200 OK\r\n"), "{metrics}");
    assert!(
        metrics.contains("Content-Type: text/plain; version=0.0.4"),
        "{metrics}"
    );
    assert!(
        metrics.contains("flow_runs_finished_total{workflow=\"Scraped\",status=\"succeeded\"} 1\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("flow_runs_in_flight{workflow=\"Scraped\"} 0\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("# TYPE flow_step_duration_seconds histogram"),
        "{metrics}"
    );
    assert!(other.starts_with("HTTP/1.1 404 "), "{other}");
    assert!(delete.starts_with("HTTP/1.1 405 "), "{delete}");
    assert!(nonsense.starts_with("HTTP/1.1 400 "), "{nonsense}");

    // The recorder is installed once: installing again gives the same one.
    // The run was counted from its creation, before the worker served the recorder.
    let again = Prometheus::install().expect("the same recorder");
    for handle in [&first, &again] {
        let text = handle.render();
        assert!(
            text.contains("flow_runs_started_total{workflow=\"Scraped\"} 1\n"),
            "{text}"
        );
    }
    // An address that is taken is refused with a typed error.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let addr = taken.local_addr().expect("its address");
    match Worker::new(MemoryStore::new()).prometheus(addr) {
        Err(MetricsError::Bind { addr: refused, .. }) => assert_eq!(refused, addr),
        other => panic!("a taken address is refused: {other:?}"),
    }
}

#[test]
fn a_worker_on_a_runtime_without_io_serves_its_endpoint_all_the_same() {
    // A runtime with the timer alone: the endpoint is a thread of its own, which needs none
    // of the runtime's I/O; it stops with the worker's `run`.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime");
    let worker = Worker::new(MemoryStore::new())
        .poll_interval(Duration::from_millis(5))
        .prometheus(SocketAddr::from(([127, 0, 0, 1], 0)))
        .expect("the endpoint is bound");
    let addr = worker.metrics_addr().expect("its address");
    let (scraped, answer) = std::sync::mpsc::channel();
    let mut got = None;
    let report = runtime
        .block_on(async {
            worker
                .run(async {
                    // Scrape from another thread while the worker runs, then stop it.
                    std::thread::spawn(move || {
                        let _ = scraped.send(request(addr, "GET /metrics HTTP/1.1\r\n\r\n"));
                    });
                    for _ in 0..2_000 {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                        if let Ok(answer) = answer.try_recv() {
                            got = Some(answer);
                            return;
                        }
                    }
                })
                .await
        })
        .expect("the worker runs");
    assert!(report.polls >= 1, "{report:?}");
    let got = got.expect("the endpoint answered within 10 s");
    assert!(got.starts_with("HTTP/1.1 200 OK"), "{got}");
}
