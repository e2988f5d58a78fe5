//! apalis on PostgreSQL, driven by the scale bench (`benches/scale.rs`):
//!
//! - `flow-bench-queue push QUEUE N`: creates apalis's schema if needed, pushes N no-op jobs
//!   (the numbers 0..N) on QUEUE, and exits.
//! - `flow-bench-queue work QUEUE IN_FLIGHT`: connects, waits for a first line on its standard
//!   input, then runs a worker on QUEUE (IN_FLIGHT jobs at once, fetched IN_FLIGHT at a time)
//!   until its standard input closes.
//!
//! The server is `FLOW_PG_URL`.

use std::io::{BufRead, Read};
use std::process::ExitCode;

use apalis::prelude::*;
use apalis_postgres::{Config, PgPool, PostgresStorage};

type Error = Box<dyn std::error::Error>;

/// The job: nothing, as the bench's flow operations.
async fn noop(_job: u64) -> Result<(), BoxDynError> {
    Ok(())
}

async fn push(pool: &PgPool, queue: &str, n: u64) -> Result<(), Error> {
    PostgresStorage::setup(pool).await?;
    let config = Config::default().queue(queue);
    let mut backend = PostgresStorage::<u64>::new(pool).with_config(config);
    backend
        .push_stream(&mut futures::stream::iter(0..n))
        .await?;
    Ok(())
}

async fn work(pool: &PgPool, queue: &str, in_flight: usize) -> Result<(), Error> {
    let config = Config::default().queue(queue).batch_size(in_flight);
    let backend = PostgresStorage::new(pool).with_config(config);
    let (went, go) = tokio::sync::oneshot::channel::<()>();
    let (closed, stop) = tokio::sync::oneshot::channel::<()>();
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin().lock();
        let _ = stdin.read_line(&mut String::new());
        let _ = went.send(());
        let _ = stdin.read_to_end(&mut Vec::new());
        let _ = closed.send(());
    });
    let _ = go.await;
    let worker = WorkerBuilder::new(format!("bench-{}", std::process::id()))
        .backend(backend)
        .concurrency(in_flight)
        .build(noop);
    tokio::select! {
        ran = worker.run() => ran?,
        _ = stop => {}
    }
    Ok(())
}

async fn main_async(args: &[String]) -> Result<(), Error> {
    let url = std::env::var("FLOW_PG_URL").map_err(|_| "FLOW_PG_URL is not set")?;
    let pool = PgPool::connect(&url).await?;
    match args {
        [mode, queue, n] if mode == "push" => push(&pool, queue, n.parse()?).await,
        [mode, queue, n] if mode == "work" => work(&pool, queue, n.parse()?).await,
        _ => Err("usage: flow-bench-queue push QUEUE N | work QUEUE IN_FLIGHT".into()),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start tokio: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(main_async(&args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}
