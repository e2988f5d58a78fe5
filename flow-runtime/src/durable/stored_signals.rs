//! Durable `Signal` steps: the step's future ([`durable_signal`]), what it tells the scheduler
//! while it is polled ([`SignalCtx`]), and the typed sender [`send_signal`].
//!
//! In a durable run, a `Signal` step takes its payload from the run's store, never from the
//! in-memory mailbox: the run's journal (`durable/journal/inbox.rs`) keeps the run's
//! unconsumed signals, polls the store for new ones while a step waits, and hands one signal
//! at a time to the waiting step through the attempt's context. The step decodes it into its
//! type: on success its `SignalReceived`, its `Completed`, its output and the signal's
//! consumption go into one batch; a payload that does not decode is consumed with a
//! `SignalRejected` event, and the step keeps waiting.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use super::{CURRENT, Durable, DurableError, DurableWorkflow};
use crate::error::NodeError;
use crate::signal::{Mailbox, SignalKey, WaitSignal, signal};
use crate::slot::Slot;
use crate::store::{NewSignal, RunFilter, SignalMode, SignalSent, Store, StoreError, StoredSignal};

/// What the scheduler and a durable `Signal` step tell each other during one poll.
#[derive(Default)]
pub(crate) struct SignalCtx {
    /// The signal handed to the step for this poll (the oldest unconsumed one of its name).
    pub(crate) delivery: Option<StoredSignal>,
    /// What the step did with it.
    pub(crate) taken: Option<Taken>,
    /// The step's waker, to poll it again when a signal comes.
    pub(crate) waker: Option<Waker>,
}

/// What a durable `Signal` step did with the signal it was handed.
pub(crate) enum Taken {
    /// Its payload is the step's output: the signal of this id is consumed.
    Consumed(u64),
    /// Its payload does not decode into the step's type: consumed, and the step waits on.
    Rejected(u64, String),
}

/// Where a [`DurableSignal`] takes its payload from, decided at its first poll.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    /// Not polled yet.
    Unknown,
    /// The run's store, through the scheduler (a durable run).
    Store,
    /// The run's in-memory mailbox (the workflow run without a store).
    Mailbox,
}

/// The future of a `Signal` step of a `#[flow(durable)]` workflow: in a durable run it takes
/// its payload from the run's store, as JSON; in a run without a store, from the mailbox, as
/// any `Signal` step.
#[must_use = "futures do nothing unless polled"]
pub struct DurableSignal<'a, T> {
    wait: WaitSignal<'a, T>,
    name: &'static str,
    slot: Option<&'a Slot<T>>,
    source: Source,
    /// The payload's decoder and encoder, taken where `T: Durable` is checked (on the user's
    /// type), so that the future itself asks nothing of `T` and adds no error of its own.
    decode: fn(&[u8]) -> serde_json::Result<T>,
    encode: fn(&T) -> serde_json::Result<Vec<u8>>,
}

/// The future of a durable workflow's `Signal` step waiting for the signal `name`, whose
/// payload goes to `slot`. Called by generated code, spanned on the payload's type, so that
/// a type that cannot be stored is an error on it.
pub fn durable_signal<'a, T: Durable>(
    env: &'a Mailbox,
    name: &'static str,
    slot: Option<&'a Slot<T>>,
) -> DurableSignal<'a, T> {
    DurableSignal {
        wait: signal(env, name, slot),
        name,
        slot,
        source: Source::Unknown,
        decode: |bytes| serde_json::from_slice(bytes),
        encode: |value| serde_json::to_vec(value),
    }
}

/// What the attempt's context says, for a [`DurableSignal`]'s poll.
enum Given {
    /// The step is restored from the journal: its stored output.
    Restore(Vec<u8>),
    /// The step waits in a durable run: the signal handed to it, if any.
    Delivery(Option<StoredSignal>),
    /// No durable context: a run without a store.
    Nothing,
}

impl<T: 'static> Future for DurableSignal<'_, T> {
    type Output = Result<(), NodeError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if this.source == Source::Mailbox {
            return Pin::new(&mut this.wait).poll(cx);
        }
        let given = CURRENT.with(|c| {
            let mut current = c.borrow_mut();
            let Some(ctx) = current.as_mut() else {
                return Given::Nothing;
            };
            if let Some(bytes) = ctx.restore.take() {
                return Given::Restore(bytes);
            }
            match ctx
                .signal
                .as_mut()
                .and_then(|s| s.downcast_mut::<SignalCtx>())
            {
                Some(signal) => Given::Delivery(signal.delivery.take()),
                None => Given::Nothing,
            }
        });
        match given {
            Given::Restore(bytes) => {
                this.source = Source::Store;
                let Some(slot) = this.slot else {
                    return Poll::Ready(Ok(()));
                };
                Poll::Ready(match (this.decode)(&bytes) {
                    Ok(value) => {
                        slot.put(value);
                        Ok(())
                    }
                    Err(error) => Err(NodeError::Failed(
                        format!(
                            "the stored payload of signal `{}` cannot be read as `{}`: {error}",
                            this.name,
                            std::any::type_name::<T>()
                        )
                        .into(),
                    )),
                })
            }
            Given::Delivery(delivery) => {
                this.source = Source::Store;
                if let Some(delivered) = delivery {
                    match (this.decode)(&delivered.payload) {
                        Ok(value) => return Poll::Ready(this.take(delivered.id, value)),
                        Err(error) => tell(|signal| {
                            signal.taken = Some(Taken::Rejected(delivered.id, error.to_string()));
                        }),
                    }
                }
                tell(|signal| signal.waker = Some(cx.waker().clone()));
                Poll::Pending
            }
            Given::Nothing if this.source == Source::Unknown => {
                this.source = Source::Mailbox;
                Pin::new(&mut this.wait).poll(cx)
            }
            // Polled outside its durable run's scheduler: nothing to take here.
            Given::Nothing => Poll::Pending,
        }
    }
}

impl<T: 'static> DurableSignal<'_, T> {
    /// The payload of signal `id` decoded: it becomes the step's output, stored with its
    /// completion (a named step's), and the signal is consumed in the same batch.
    fn take(&self, id: u64, value: T) -> Result<(), NodeError> {
        let bytes = match self.slot {
            Some(_) => Some((self.encode)(&value).map_err(|error| {
                NodeError::Failed(
                    format!(
                        "the payload of signal `{}` cannot be stored: {error}",
                        self.name
                    )
                    .into(),
                )
            })?),
            None => None,
        };
        CURRENT.with(|c| {
            if let Some(ctx) = c.borrow_mut().as_mut() {
                if let Some(bytes) = bytes {
                    ctx.captured = Some((std::any::type_name::<T>(), bytes));
                }
                if let Some(signal) = ctx
                    .signal
                    .as_mut()
                    .and_then(|s| s.downcast_mut::<SignalCtx>())
                {
                    signal.taken = Some(Taken::Consumed(id));
                }
            }
        });
        if let Some(slot) = self.slot {
            slot.put(value);
        }
        Ok(())
    }
}

/// Tells the scheduler something through the attempt's signal context.
fn tell(f: impl FnOnce(&mut SignalCtx)) {
    CURRENT.with(|c| {
        let mut current = c.borrow_mut();
        let signal = current
            .as_mut()
            .and_then(|ctx| ctx.signal.as_mut())
            .and_then(|s| s.downcast_mut::<SignalCtx>());
        if let Some(signal) = signal {
            f(signal);
        }
    });
}

impl<T> fmt::Debug for DurableSignal<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DurableSignal")
            .field("name", &self.name)
            .field("source", &self.source)
            .finish()
    }
}

/// Sends `value` as the signal `key` to the durable run `run` of `store`: serialized to JSON
/// and stored, kept until a `Signal` step of the run takes it (or, for a `transient` signal,
/// stored only while a step waits for it: [`SignalSent::Dropped`] otherwise). When a step of
/// the run waits for it, the run's wake-up time becomes now, so a
/// [`Worker`](crate::worker::Worker) resumes a run that no process holds at its next look; a
/// live run finds the signal at its next poll of the store
/// ([`DurableRunner::signal_poll`](super::DurableRunner::signal_poll)).
///
/// The signal is consumed exactly once: by the batch that records the step's
/// `SignalReceived` and stores the payload as the step's output.
///
/// ```
/// use flowdag_runtime::durable::send_signal;
/// use flowdag_runtime::store::{MemoryStore, NewRun, Owner, SignalSent};
/// use flowdag_runtime::SignalKey;
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// # let store = MemoryStore::new();
/// # use flowdag_runtime::store::Store;
/// # let lease = std::time::Duration::from_secs(30);
/// # store.create_run(NewRun::new("order-42", "Order", 1, Owner::new("me"), lease)).await?;
/// # const APPROVE: SignalKey<bool> = SignalKey::__new("approve");
/// // `Order::APPROVE`, the key `workflow!` declares for `Signal(approve: bool)`.
/// let sent = send_signal(&store, "order-42", APPROVE, true).await?;
/// assert!(matches!(sent, SignalSent::Stored { .. }));
/// # Ok::<(), flowdag_runtime::durable::DurableError>(())
/// # }).unwrap();
/// ```
///
/// # Errors
///
/// [`DurableError::Store`]: [`StoreError::NotFound`] for a run that does not exist,
/// [`StoreError::Finished`] for a run that has ended (nothing is stored), the store's own
/// failures; [`DurableError::Input`] when `value` cannot be serialized.
pub fn send_signal<'s, S: Store + ?Sized, T: Durable>(
    store: &'s S,
    run: &str,
    key: SignalKey<T>,
    value: T,
) -> impl Future<Output = Result<SignalSent, DurableError>> + use<'s, S, T> {
    let payload = serde_json::to_vec(&value).map_err(|error| DurableError::Input {
        run: run.to_owned(),
        why: format!(
            "the payload of signal `{}` cannot be stored: {error}",
            key.name()
        ),
    });
    let mode = match key.is_transient() {
        true => SignalMode::Transient,
        false => SignalMode::Kept,
    };
    let run = run.to_owned();
    async move {
        let signal = NewSignal {
            run,
            name: key.name().to_owned(),
            payload: payload?,
            mode,
        };
        store
            .send_signal(signal)
            .await
            .map_err(|error: StoreError| DurableError::Store(error))
    }
}

/// Sends signal `name` with the JSON `payload` to run `run` of workflow `W`, checked first: the
/// workflow must declare the signal, the payload must read as its type, and the run must be a
/// run of `W` that has not ended; only then is the signal stored (kept or transient, as `W`
/// declares it). For callers that have a name and JSON rather than a typed key: a command
/// line, an HTTP endpoint. [`send_signal`] with a workflow's key (`Order::APPROVE`) is checked
/// by the compiler instead.
///
/// ```
/// use flowdag_runtime::durable::{DurableError, send_signal_json};
/// # use flowdag_runtime::store::MemoryStore;
/// # async fn f<W: flowdag_runtime::durable::DurableWorkflow>(store: &MemoryStore) {
/// // `approve` declared as `Signal(approve: bool)`: `"yes"` is not a `bool`.
/// let refused = send_signal_json::<W, _>(store, "order-42", "approve", br#""yes""#).await;
/// assert!(matches!(refused, Err(DurableError::Signal { .. })));
/// # }
/// ```
///
/// # Errors
///
/// [`DurableError::Signal`] when the check refuses it (nothing is stored);
/// [`DurableError::Store`] as [`send_signal`].
pub fn send_signal_json<'s, W: DurableWorkflow, S: Store + ?Sized>(
    store: &'s S,
    run: &str,
    name: &str,
    payload: &[u8],
) -> impl Future<Output = Result<SignalSent, DurableError>> + use<'s, W, S> {
    let (run, name) = (run.to_owned(), name.to_owned());
    let checked = W::__check_signal(&name, payload);
    let payload = payload.to_vec();
    async move {
        let refuse = |why: String| DurableError::Signal {
            run: run.clone(),
            signal: name.clone(),
            why,
        };
        let transient = checked.map_err(refuse)?;
        let filter = RunFilter {
            id: Some(run.clone()),
            ..RunFilter::default()
        };
        let found = store
            .list_runs(&filter)
            .await
            .map_err(DurableError::Store)?;
        let Some(summary) = found.into_iter().next() else {
            return Err(DurableError::Store(StoreError::NotFound { run }));
        };
        if summary.workflow != W::durable_name() {
            return Err(refuse(format!(
                "it is a run of `{}`, not of `{}`",
                summary.workflow,
                W::durable_name()
            )));
        }
        let signal = NewSignal {
            run,
            name,
            payload,
            mode: match transient {
                true => SignalMode::Transient,
                false => SignalMode::Kept,
            },
        };
        store.send_signal(signal).await.map_err(DurableError::Store)
    }
}

/// A signal's payload type, probed by the check that generated code makes for each declared
/// signal of a durable workflow: `(&PayloadProbe::<T>::new()).check_payload(..)` reads the
/// payload as a `T` when `T` is `Durable` ([`CheckDurable`]). For a `T` that is not, the call
/// resolves to [`CheckAny`] instead, so that the check adds no error of its own to the one the
/// signal's step already reports on the type.
pub struct PayloadProbe<T>(std::marker::PhantomData<fn() -> T>);

impl<T> PayloadProbe<T> {
    /// The probe of `T`.
    pub const fn new() -> Self {
        PayloadProbe(std::marker::PhantomData)
    }
}

impl<T> Default for PayloadProbe<T> {
    fn default() -> Self {
        PayloadProbe::new()
    }
}

impl<T> Clone for PayloadProbe<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for PayloadProbe<T> {}

/// The check of a payload whose type can be stored ([`PayloadProbe`]).
pub trait CheckDurable {
    /// `Ok` when `payload` reads as the probed type, else why not.
    fn check_payload(self, name: &str, payload: &[u8]) -> Result<(), String>;
}

impl<T: Durable> CheckDurable for &PayloadProbe<T> {
    fn check_payload(self, name: &str, payload: &[u8]) -> Result<(), String> {
        serde_json::from_slice::<T>(payload)
            .map(drop)
            .map_err(|error| {
                format!(
                    "its payload does not read as `{}`, the type of signal `{name}`: {error}",
                    std::any::type_name::<T>()
                )
            })
    }
}

/// The check of a payload whose type cannot be stored ([`PayloadProbe`]): never reached in a
/// workflow that compiles.
pub trait CheckAny {
    /// Always `Err`.
    fn check_payload(self, name: &str, payload: &[u8]) -> Result<(), String>;
}

impl<T> CheckAny for PayloadProbe<T> {
    fn check_payload(self, name: &str, _payload: &[u8]) -> Result<(), String> {
        Err(format!(
            "the payload type of signal `{name}` cannot be stored"
        ))
    }
}
