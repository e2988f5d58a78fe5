//! Child runs: a `Workflow(Child(..))` step at the top of a durable workflow runs `Child` (a
//! durable workflow too) as a durable run of its own, journaled in the parent's store under
//! the id `"{parent}/{step}"` (`"{parent}/{step}#{attempt}"` for a retry), its parent recorded
//! with it. What the code `#[flow(durable)]` generates calls, re-exported by `__private` only.
//!
//! The parent's step awaits the child's run in its own process (a distributed parent's, the
//! child's end): the child's steps are
//! journaled in the child's journal, the step's output (the child's) in the parent's. When the
//! parent is resumed, a step that had completed is restored from the parent's journal (the
//! child is not touched); a step that was running starts the child's run again, which resumes
//! it from its own journal (a child that had ended gives its result again, running nothing).
//! A child held by another owner (a process that died, whose lease has not lapsed) is waited
//! for. A parent that ends while a child of it has not (it was cancelled, or failed fast) asks
//! the child to cancel ([`cancel_orphans`], and [`cancel_if_orphaned`] when the parent's
//! process stopped before it could): the child's compensations run when a worker or a resume
//! next drives it. A distributed parent's child is handed to the workers instead
//! ([`decided_anywhere`]), and a parent that compensates undoes its children ([`undo_child`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use pin_project_lite::pin_project;

use super::{CURRENT, DurableError, DurableRunner, DurableWorkflow, LEASE};
use crate::error::NodeError;
use crate::nest_ctx::NestCtx;
use crate::report::Outcome;
use crate::store::{Owner, RunStatus, Store, StoreError};

/// What the journal gives the attempt of a `Workflow` step of a durable run: the parent's
/// store, the owner its children are held under ([`child_owner`]) and whether the parent is
/// distributed.
pub(crate) struct ChildCtx {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) owner: Owner,
    pub(crate) distributed: bool,
    /// The parent's generation, when its workflow continues as new.
    pub(crate) generation: Option<u32>,
    /// The step's attempt that runs the child (or, in a compensation, that completed it).
    pub(crate) attempt: u32,
}

/// The owner a parent held by `parent` holds its children under: a name of their own, so that
/// a worker (whose runs are free for it) does not take a child its parent drives.
pub(crate) fn child_owner(parent: &Owner) -> Owner {
    Owner::new(format!("{parent}/child"))
}

/// The id of the child run at step `step`'s attempt `attempt` of run `parent`; in a run that
/// continues as new, of its generation `generation` (`order-1~2/shipped`: the id the
/// generation is kept under, once it ends, with the child's step after it).
pub(crate) fn child_id(parent: &str, generation: Option<u32>, step: &str, attempt: u32) -> String {
    let parent = match generation {
        Some(generation) => format!("{parent}~{generation}"),
        None => parent.to_owned(),
    };
    match attempt {
        0 | 1 => format!("{parent}/{step}"),
        _ => format!("{parent}/{step}#{attempt}"),
    }
}

/// How long a child held by another owner is waited for before the next try: until its lease
/// lapses, at least 10 ms and at most a lease.
fn wait_for(until_ms: u64) -> Duration {
    let now = crate::store::now_ms();
    Duration::from_millis(until_ms.saturating_sub(now)).clamp(Duration::from_millis(10), LEASE)
}

/// Starts (or resumes) a durable run of `C` for the `Workflow(C(..))` step being polled: the
/// future gives the child's outcome, or the step's error when the child could not be run
/// (the store failed, the id belongs to another run, the child's graph changed). Called by
/// generated code.
pub fn durable_child<C: DurableWorkflow>(
    nest: &NestCtx,
    input: C::Stored,
) -> ChildRun<C::Stored, C::Output, impl Future<Output = Ran<C::Output>>> {
    nest.start(0);
    let found = CURRENT.with(|c| {
        let c = c.borrow();
        let ctx = c.as_ref()?;
        let child = ctx.child.as_ref()?.downcast_ref::<ChildCtx>()?;
        Some((
            Arc::clone(&child.store),
            child.owner.clone(),
            child.distributed,
            child_id(
                ctx.attempt.run(),
                child.generation,
                ctx.attempt.node(),
                child.attempt,
            ),
            ctx.attempt.run().to_owned(),
        ))
    });
    let start: fn(Spec, C::Stored) -> _ = start::<C>;
    let (state, spec) = match found {
        Some((store, owner, distributed, id, parent)) => {
            let Ok(bytes) = serde_json::to_vec(&input) else {
                // Its input cannot be stored: the child's own run refuses it (`Input`), which
                // stops the parent.
                let run = Some(start(
                    Spec {
                        store,
                        owner,
                        distributed,
                        id,
                        parent,
                        input: Vec::new(),
                    },
                    input,
                ));
                return ChildRun {
                    run,
                    start,
                    spec: None,
                    state: State::Running,
                    sleep: None,
                    _output: std::marker::PhantomData,
                };
            };
            let spec = Spec {
                store,
                owner,
                distributed,
                id,
                parent,
                input: bytes,
            };
            (State::Running, Some(spec))
        }
        None => (State::Refused, None),
    };
    let run = spec.clone().map(|spec| start(spec, input));
    ChildRun {
        run,
        start,
        spec,
        state,
        sleep: None,
        _output: std::marker::PhantomData,
    }
}

/// Undoes the child run of the `Workflow` step whose compensation is being polled (the
/// compensation the macro gives every `Workflow(C(..))` step of a durable workflow whose child
/// compensates): a child that succeeded is reopened to be undone (its journal cut before its
/// end, with the order to cancel itself once replayed) and driven
/// here, under the parent's child owner, until it has run its compensations. `Ok` when the
/// child ended undone (`cancelled`), when it was undone before (a compensation that runs
/// again after a crash), or when the store has no such run (deleted: nothing to undo); the
/// compensation's error when one of the child's compensations failed for good, or when the
/// child could not be driven. Called by generated code.
pub fn undo_child<C: DurableWorkflow>() -> impl Future<Output = Result<(), NodeError>> {
    let found = CURRENT.with(|c| {
        let c = c.borrow();
        let ctx = c.as_ref()?;
        let child = ctx.child.as_ref()?.downcast_ref::<ChildCtx>()?;
        Some((
            Arc::clone(&child.store),
            child.owner.clone(),
            child_id(
                ctx.attempt.run(),
                child.generation,
                ctx.attempt.node(),
                child.attempt,
            ),
        ))
    });
    async move {
        if !C::__COMPENSATES {
            // Nothing to undo (the run stays as it ended).
            return Ok(());
        }
        let Some((store, owner, id)) = found else {
            return Err(NodeError::Failed(
                "a durable child run can be undone only in the compensation of a durable run's `Workflow` step"
                    .into(),
            ));
        };
        undo::<C>(store, owner, id).await
    }
}

/// How many times [`undo`] drives a child that is not held by another owner before it gives
/// up (each drive ends the child, or stops it for a reason that is reported).
const UNDO_DRIVES: u32 = 8;

/// [`undo_child`]'s work on child run `id`.
async fn undo<C: DurableWorkflow>(
    store: Arc<dyn Store>,
    owner: Owner,
    id: String,
) -> Result<(), NodeError> {
    let failed = |why: String| NodeError::Failed(format!("undoing child run `{id}`: {why}").into());
    // The store failed, or the child could not be driven (its graph changed, its replay
    // diverged): not the compensation's failure. The journal stops the parent (as when a
    // child stops in a forward step), and its resume undoes the child again.
    let stopped = |error: DurableError| child_error(&id, error);
    let mut drives = 0;
    loop {
        let summary = match super::operations::one(&*store, &id).await {
            Ok(summary) => summary,
            // Deleted: nothing is left to undo.
            Err(DurableError::Store(StoreError::NotFound { .. })) => return Ok(()),
            Err(error) => return Err(stopped(error)),
        };
        match summary.status {
            RunStatus::Succeeded => {
                super::operations::undo_run(&*store, &id)
                    .await
                    .map_err(stopped)?;
            }
            _ if drives >= UNDO_DRIVES => {
                return Err(failed(format!(
                    "it is still `{}` after {UNDO_DRIVES} drives",
                    summary.status
                )));
            }
            // Being undone, or undone (a finished run gives its end again, running nothing).
            _ => {
                drives += 1;
                match resume_child::<C>(Arc::clone(&store), id.clone(), owner.clone()).await {
                    Ok(outcome) => return undone(outcome).map_err(failed),
                    Err(DurableError::Store(StoreError::Busy { until_ms, .. })) => {
                        drives -= 1;
                        tokio::time::sleep(wait_for(until_ms)).await;
                    }
                    Err(error) => return Err(stopped(error)),
                }
            }
        }
    }
}

/// Whether a child run's end says it was undone: cancelled, every compensation it started
/// succeeded.
fn undone<O>(outcome: Outcome<O>) -> Result<(), String> {
    let error = match outcome.result {
        Ok(_) => return Err("it succeeded again instead of cancelling".to_owned()),
        Err(error) => error,
    };
    match error
        .compensations()
        .iter()
        .find_map(|c| match c.outcome() {
            crate::compensation::CompensationOutcome::Failed { error } => Some((c.node(), error)),
            _ => None,
        }) {
        Some((step, why)) => Err(format!(
            "the compensation of its step `{step}` failed: {why}"
        )),
        None if error.is_cancelled() => Ok(()),
        None => Err(format!("it did not cancel: {error}")),
    }
}

/// How a child run's future ends: its outcome, or why it stopped.
type Ran<O> = Result<Outcome<O>, DurableError>;

/// What a child run is started with, kept to start it again after a wait.
#[derive(Clone)]
pub(crate) struct Spec {
    store: Arc<dyn Store>,
    owner: Owner,
    distributed: bool,
    id: String,
    parent: String,
    /// The child's input as JSON (read again for each try).
    input: Vec<u8>,
}

/// The child's run under its own id, held by the parent's owner, its parent stored with its
/// options. A distributed parent's child is handed to the workers ([`decided_anywhere`]).
async fn start<C: DurableWorkflow>(spec: Spec, input: C::Stored) -> Ran<C::Output> {
    if spec.distributed {
        return decided_anywhere::<C>(spec, input).await;
    }
    DurableRunner::<C> {
        owner: spec.owner,
        distributed: false,
        parent: Some(spec.parent),
        ..DurableRunner::new(crate::options::RunOptions::default(), spec.store, spec.id)
    }
    .execute(input)
    .await
}

/// The longest wait between two looks at a distributed child's status.
const LOOK_AT_MOST: Duration = Duration::from_millis(500);

/// A distributed parent's child: submitted to the workers (created, its first decisions
/// committed, then unloaded: any [`Worker`](crate::worker::Worker) that registered `C` decides it),
/// unless it exists already (the step runs again after a stop); then its end is awaited,
/// looking at its status with a growing interval (10 ms to 500 ms), and its outcome read back
/// from the store (a finished run's resume runs nothing).
async fn decided_anywhere<C: DurableWorkflow>(spec: Spec, input: C::Stored) -> Ran<C::Output> {
    let exists = match super::operations::one(&*spec.store, &spec.id).await {
        Ok(_) => true,
        Err(DurableError::Store(StoreError::NotFound { .. })) => false,
        Err(error) => return Err(error),
    };
    if !exists {
        let submitted = DurableRunner::<C> {
            owner: spec.owner.clone(),
            distributed: true,
            parent: Some(spec.parent.clone()),
            ..DurableRunner::new(
                crate::options::RunOptions::default(),
                Arc::clone(&spec.store),
                spec.id.clone(),
            )
        }
        .submit(input)
        .await?;
        if let super::Ended::Finished(outcome) = submitted {
            return Ok(outcome);
        }
    }
    let mut look = Duration::from_millis(10);
    while !super::operations::one(&*spec.store, &spec.id)
        .await?
        .status
        .is_finished()
    {
        tokio::time::sleep(look).await;
        look = (look * 2).min(LOOK_AT_MOST);
    }
    resume_child::<C>(spec.store, spec.id, spec.owner).await
}

/// Resumes child run `id` of `C` under `owner` (the parent's child owner), never unloaded: a
/// run that has ended gives its end again, running nothing.
fn resume_child<C: DurableWorkflow>(
    store: Arc<dyn Store>,
    id: String,
    owner: Owner,
) -> impl Future<Output = Ran<C::Output>> {
    let holder = super::Holder {
        owner,
        lease: LEASE,
        mailbox: None,
    };
    super::resume_in::<C, Outcome<C::Output>>(store, id, (None, None), Some(holder))
}

enum State {
    Running,
    Waiting,
    Refused,
    Done,
}

pin_project! {
    /// The future of a child run ([`durable_child`]): `S` is the child's stored parameters,
    /// `O` its output.
    #[must_use = "futures do nothing unless polled"]
    pub struct ChildRun<S, O, F> {
        #[pin]
        run: Option<F>,
        start: fn(Spec, S) -> F,
        spec: Option<Spec>,
        state: State,
        sleep: Option<Pin<Box<tokio::time::Sleep>>>,
        _output: std::marker::PhantomData<fn() -> O>,
    }
}

impl<S, O, F> Future for ChildRun<S, O, F>
where
    S: serde::de::DeserializeOwned,
    F: Future<Output = Ran<O>>,
{
    type Output = Result<Outcome<O>, NodeError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state {
                State::Refused => {
                    *this.state = State::Done;
                    return Poll::Ready(Err(NodeError::Failed(
                        "a durable child run can start only in an attempt of a durable run's `Workflow` step"
                            .into(),
                    )));
                }
                State::Done => return Poll::Pending,
                State::Waiting => {
                    if let Some(sleep) = this.sleep.as_mut() {
                        std::task::ready!(sleep.as_mut().poll(cx));
                    }
                    *this.sleep = None;
                    let Some(spec) = this.spec.as_ref() else {
                        *this.state = State::Refused;
                        continue;
                    };
                    let input = match serde_json::from_slice::<S>(&spec.input) {
                        Ok(input) => input,
                        Err(error) => {
                            *this.state = State::Done;
                            return Poll::Ready(Err(NodeError::Failed(
                                format!("the child's input cannot be read back: {error}").into(),
                            )));
                        }
                    };
                    let run = (this.start)(spec.clone(), input);
                    this.run.set(Some(run));
                    *this.state = State::Running;
                }
                State::Running => {
                    let Some(run) = this.run.as_mut().as_pin_mut() else {
                        *this.state = State::Refused;
                        continue;
                    };
                    let ended = std::task::ready!(run.poll(cx));
                    this.run.set(None);
                    match ended {
                        Ok(outcome) => {
                            *this.state = State::Done;
                            return Poll::Ready(Ok(outcome));
                        }
                        Err(DurableError::Store(StoreError::Busy { until_ms, .. })) => {
                            *this.sleep = Some(Box::pin(tokio::time::sleep(wait_for(until_ms))));
                            *this.state = State::Waiting;
                        }
                        Err(error) => {
                            *this.state = State::Done;
                            let id = this.spec.as_ref().map_or("", |spec| spec.id.as_str());
                            return Poll::Ready(Err(child_error(id, error)));
                        }
                    }
                }
            }
        }
    }
}

/// What the error of a `Workflow` step whose child run stopped without an end starts with: the
/// journal stops the parent when it sees it (the step did not fail; the child can go on).
pub(crate) const CHILD_STOPPED: &str = "its child run stopped without an end";

/// The step's error when its child run stopped without an end.
fn child_error(id: &str, error: DurableError) -> NodeError {
    NodeError::Failed(format!("{CHILD_STOPPED}: `{id}`: {error}").into())
}

/// Asks the children of run `parent` (its generation `generation`, in a run that continues as
/// new) that have not ended to cancel: the runs `"{parent}/{step}"` the store holds, found by
/// their ids (not by what this process started: a parent that ends right after a resume, or
/// one terminated while nobody held it, has started nothing here). Best effort: a request that
/// cannot be stored leaves the child as it is (a child whose parent has ended asks for its own
/// cancellation when it is next loaded: [`cancel_if_orphaned`]).
pub(crate) async fn cancel_orphans<S: Store + ?Sized>(
    store: &S,
    parent: &str,
    generation: Option<u32>,
) {
    let prefix = match generation {
        Some(generation) => format!("{parent}~{generation}/"),
        None => format!("{parent}/"),
    };
    let filter = crate::store::RunFilter {
        id_contains: Some(prefix.clone()),
        ..crate::store::RunFilter::default()
    };
    let Ok(runs) = store.list_runs(&filter).await else {
        return;
    };
    for child in runs {
        let direct = child
            .id
            .strip_prefix(&prefix)
            .is_some_and(|step| !step.contains('/'));
        if direct && !child.status.is_finished() {
            let _ = super::operations::cancel_run(
                store,
                &child.id,
                Some("its parent run ended before it"),
            )
            .await;
        }
    }
}

/// A child run loaded while its parent has already ended (the parent's process stopped between
/// its end and the cancel requests for its children): stores a cancel request for it, and
/// says whether it did (the caller loads the child again, so that it takes the request before
/// anything of it runs). Best effort, as [`cancel_orphans`].
pub(crate) async fn cancel_if_orphaned(store: &dyn Store, child: &str, parent: &str) -> bool {
    let filter = crate::store::RunFilter {
        id: Some(parent.to_owned()),
        ..crate::store::RunFilter::default()
    };
    let ended = match store.list_runs(&filter).await {
        Ok(runs) => runs.first().is_none_or(|run| run.status.is_finished()),
        Err(_) => false,
    };
    ended
        && super::operations::cancel_run(store, child, Some("its parent run ended before it"))
            .await
            .is_ok()
}
