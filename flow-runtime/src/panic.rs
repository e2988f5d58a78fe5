//! Caught panics and timers: what a panic's payload says, without letting a payload whose own
//! `Drop` panics unwind into the caller, and tokio timers that report a missing runtime as an
//! error instead of a panic.

use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::time::Duration;

use tokio::time::Sleep;

use crate::error::NodeError;
use crate::policy::CancelReason;

/// The message of a caught panic's payload (a `String` or a `&str`, as `panic!` makes).
///
/// The payload is dropped here, and dropping runs the payload's own `Drop`, which may panic
/// too (`std::panic::panic_any` takes any value): that second panic is caught, and its own
/// payload forgotten (leaked) rather than dropped, so nothing unwinds into the caller, whose
/// poll of the run would otherwise unwind.
pub(crate) fn panic_message(payload: Box<dyn Any + Send>) -> String {
    let payload = match payload.downcast::<String>() {
        Ok(message) => return *message,
        Err(payload) => payload,
    };
    let payload = match payload.downcast::<&'static str>() {
        Ok(message) => return (*message).to_string(),
        Err(payload) => payload,
    };
    drop_payload(payload);
    "a panic with a non-string payload".to_string()
}

/// Drops a panic payload of unknown type; one whose `Drop` panics is leaked instead.
fn drop_payload(payload: Box<dyn Any + Send>) {
    if let Err(again) = catch_unwind(AssertUnwindSafe(move || drop(payload))) {
        // Dropping this one could panic again: leak it.
        std::mem::forget(again);
    }
}

/// What the error of a timer that cannot be made starts with.
pub(crate) const NO_TIMER: &str =
    "timeouts, retries and deadlines need a tokio runtime with time enabled";

/// A tokio timer; an error instead of a panic when there is no tokio runtime with time enabled.
pub(crate) fn timer(after: Duration) -> Result<Pin<Box<Sleep>>, NodeError> {
    catch_unwind(|| Box::pin(tokio::time::sleep(after)))
        .map_err(|payload| NodeError::Panicked(format!("{NO_TIMER} ({})", panic_message(payload))))
}

/// The timer of a run's deadline, or the reason the run is cancelled at once when none can be
/// made: [`CancelReason::NoTimer`], whose message says what is missing, once for the run.
pub(crate) fn deadline_timer(after: Duration) -> Result<Pin<Box<Sleep>>, CancelReason> {
    timer(after).map_err(|_| CancelReason::NoTimer(after))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A panic payload whose own `Drop` panics.
    struct Grenade;

    impl Drop for Grenade {
        fn drop(&mut self) {
            panic!("the payload's drop panicked");
        }
    }

    #[test]
    fn messages_of_string_payloads() {
        assert_eq!(panic_message(Box::new("static")), "static");
        assert_eq!(panic_message(Box::new(String::from("owned"))), "owned");
        assert_eq!(
            panic_message(Box::new(7_u8)),
            "a panic with a non-string payload"
        );
    }

    #[test]
    fn a_payload_whose_drop_panics_does_not_unwind() {
        assert_eq!(
            panic_message(Box::new(Grenade)),
            "a panic with a non-string payload"
        );
    }

    #[test]
    #[cfg_attr(miri, ignore = "tokio's timer driver is not run under miri")]
    fn no_timer_outside_a_tokio_runtime() {
        let error = timer(Duration::from_secs(1)).map(drop);
        assert!(
            matches!(&error, Err(NodeError::Panicked(m)) if m.starts_with("timeouts, retries")),
            "{error:?}"
        );
        assert_eq!(
            deadline_timer(Duration::from_secs(2)).map(drop),
            Err(CancelReason::NoTimer(Duration::from_secs(2)))
        );
    }
}
