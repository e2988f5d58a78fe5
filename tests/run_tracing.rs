//! The `tracing` integration: one span per node attempt, and failures at `warn`.
//!
//! Alone in its test binary on purpose. `tracing` caches each callsite's interest globally; with
//! other tests running on other threads without a subscriber, the cache could be rebuilt between
//! two attempts of the run under test and its second span went missing (the test failed now and
//! then, on CI too). Here the capturing subscriber is the global default, installed
//! before any flow callsite is met, and no other test shares the process.

mod common;

use flowdag::prelude::*;

use common::{Log, fail, work};

workflow! {
    /// A node that fails and is retried once, and a node that times out.
    Traced(log: Log) {
        Parallel {
            Sequential {
                bad = Operation(fail(&log, "bad", 5), retries = 1, backoff = "10ms"),
                Operation(work(&log, "after", 1)),
            },
            slow = Operation(work(&log, "slow", 100), timeout = "20ms"),
        }
    }
}

mod tracing_spans {
    //! A minimal subscriber that records spans and events, to check the `tracing` integration.
    use std::sync::{Arc, Mutex};

    use tracing::field::{Field, Visit};
    use tracing::span::{Attributes, Id, Record};
    use tracing::{Event, Level, Metadata, Subscriber};

    #[derive(Default, Clone)]
    pub struct Capture {
        pub spans: Arc<Mutex<Vec<String>>>,
        pub warnings: Arc<Mutex<Vec<String>>>,
        next: Arc<Mutex<u64>>,
    }

    struct Fields(String);
    impl Visit for Fields {
        fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
            self.0.push_str(&format!("{}={:?} ", field.name(), value));
        }
        fn record_str(&mut self, field: &Field, value: &str) {
            self.0.push_str(&format!("{}={} ", field.name(), value));
        }
    }

    impl Subscriber for Capture {
        fn enabled(&self, _: &Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, span: &Attributes<'_>) -> Id {
            let mut fields = Fields(format!("{} ", span.metadata().name()));
            span.record(&mut fields);
            self.spans
                .lock()
                .expect("not poisoned")
                .push(fields.0.trim_end().to_string());
            let mut next = self.next.lock().expect("not poisoned");
            *next += 1;
            Id::from_u64(*next)
        }
        fn record(&self, _: &Id, _: &Record<'_>) {}
        fn record_follows_from(&self, _: &Id, _: &Id) {}
        fn event(&self, event: &Event<'_>) {
            if *event.metadata().level() == Level::WARN {
                let mut fields = Fields(String::new());
                event.record(&mut fields);
                self.warnings
                    .lock()
                    .expect("not poisoned")
                    .push(fields.0.trim_end().to_string());
            }
        }
        fn enter(&self, _: &Id) {}
        fn exit(&self, _: &Id) {}
    }
}

#[test]
fn tracing_gets_a_span_per_attempt_and_warnings_for_failures() {
    let capture = tracing_spans::Capture::default();
    tracing::subscriber::set_global_default(capture.clone()).expect("the only subscriber");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("runtime");
    let outcome = runtime.block_on(async { Traced::runner().execute(Log::new()).await });
    assert!(outcome.result.is_err(), "bad and slow fail the run");
    let spans = capture.spans.lock().expect("not poisoned").clone();
    for attempt in [1, 2] {
        let span = format!("flow_node workflow=Traced node=bad attempt={attempt}");
        assert!(spans.contains(&span), "{span} in {spans:?}");
    }
    assert!(
        spans.contains(&"flow_node workflow=Traced node=slow attempt=1".to_string()),
        "{spans:?}"
    );
    let warnings = capture.warnings.lock().expect("not poisoned").clone();
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("message=node failed") && w.contains("node=bad")),
        "{warnings:?}"
    );
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("attempt timed out") && w.contains("node=slow")),
        "{warnings:?}"
    );
}
