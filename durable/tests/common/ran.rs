//! What the steps of a test ran, by run, and the error of steps that never fail: shared by
//! the tests of changing a workflow with runs in flight.

use std::collections::BTreeMap;
use std::sync::Mutex;

/// What ran, by run.
static RAN: Mutex<BTreeMap<String, Vec<String>>> = Mutex::new(BTreeMap::new());

/// The error of a step that never fails.
#[derive(Debug)]
pub struct Never;

impl std::fmt::Display for Never {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("never")
    }
}

impl std::error::Error for Never {}

/// Notes that the step of the current attempt ran `what`.
pub fn ran(what: &str) {
    if let Some(attempt) = flowdag::attempt() {
        RAN.lock()
            .expect("not poisoned")
            .entry(attempt.run().to_owned())
            .or_default()
            .push(what.to_owned());
    }
}

/// What ran in `run`, in order.
pub fn what_ran(run: &str) -> Vec<String> {
    RAN.lock()
        .expect("not poisoned")
        .get(run)
        .cloned()
        .unwrap_or_default()
}
