//! What one run starts from ([`RunSetup`]): the runner's options, and what the engine adds to
//! them for this run.
//!
//! The user's side is `RunOptions`, which a [`Runner`](crate::Runner) fills and nothing else
//! touches. The engine's side is here: the place of a nest instance and where its events go,
//! the lists it reuses, the steps of the workflow's compensations, and the [`Hook`] a durable
//! run's driver attaches. Generated code passes a setup along without reading it.

use std::fmt;
use std::sync::Arc;

use super::Hook;
use crate::events::EventSink;
use crate::exclusion::Groups;
use crate::graph::Graph;
use crate::nest_ctx::{NestCtx, Pool};
use crate::options::RunOptions;
#[cfg(feature = "durable")]
use crate::path::NestKind;
use crate::path::NodePath;
use crate::signal::Mailbox;

/// What one run starts from: the `RunOptions` its runner set, and what the engine adds for
/// this run. Made from the options (`RunSetup::from`), by a nest node for each instance
/// ([`NestCtx::instance`]), or by a durable run's driver. Not a public API.
#[doc(hidden)]
#[derive(Default)]
pub struct RunSetup {
    pub(crate) options: RunOptions,
    /// The nest instance this run is (`charge[3]`), when a nest node runs it.
    pub(crate) path: Option<NodePath>,
    /// Where a nest instance's events go: the root run's sink (see `events::EventSink`).
    pub(crate) sink: Option<Arc<EventSink>>,
    /// Where a nest instance's scheduler takes its lists and gives them back (its nest node's
    /// pool).
    pub(crate) pool: Option<Arc<Pool>>,
    /// The run is an instance of a nest node (a `ForEach` item, a `Loop` iteration, a child
    /// workflow), which shares the mailbox of the run holding it.
    pub(crate) instance: bool,
    /// The step of each compensation leaf of the node set, in leaf order (after the graph's
    /// nodes): empty for a workflow without `compensate = ..` (`scheduler/compensate.rs`).
    pub(crate) compensations: &'static [u32],
    /// By compensation leaf: whether it has anything to do (a child run's undo whose child
    /// compensates nothing has not, and is skipped).
    pub(crate) compensates: &'static [bool],
    /// What watches and steers the run from outside the engine (a durable run's journal).
    pub(crate) hook: Option<Box<dyn Hook>>,
    /// A nest instance: the exclusion groups of its run tree (`exclusion.rs`).
    pub(crate) groups: Option<Groups>,
    /// A nest instance inside a durable step: the keys of its steps (`attempt::KeyScope`).
    #[cfg(feature = "durable")]
    pub(crate) keys: Option<crate::attempt::KeyScope>,
}

impl RunSetup {
    /// The setup of a run that `hook` watches and steers.
    #[cfg_attr(not(feature = "durable"), allow(dead_code))]
    pub(crate) fn hooked(options: RunOptions, hook: Box<dyn Hook>) -> RunSetup {
        RunSetup {
            hook: Some(hook),
            ..RunSetup::from(options)
        }
    }
}

impl From<RunOptions> for RunSetup {
    /// The setup of a run at the top, with nothing added to the runner's options. Every field
    /// is written out (no `..Default::default()`, which would build default options only to
    /// drop them): this is on the path of every run.
    #[inline]
    fn from(options: RunOptions) -> RunSetup {
        RunSetup {
            options,
            path: None,
            sink: None,
            pool: None,
            instance: false,
            compensations: &[],
            compensates: &[],
            hook: None,
            groups: None,
            #[cfg(feature = "durable")]
            keys: None,
        }
    }
}

impl fmt::Debug for RunSetup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RunSetup")
            .field("options", &self.options)
            .field("path", &self.path)
            .field("instance", &self.instance)
            .field("compensations", &self.compensations)
            .field("hooked", &self.hook.is_some())
            .finish()
    }
}

impl NestCtx {
    /// The setup of instance `index`'s run. Call it once per instance, when the instance
    /// starts: it counts the instance as started.
    pub fn instance(&self, index: u64) -> RunSetup {
        let path = self.start(index);
        #[cfg(feature = "durable")]
        let keys = {
            let instance = match self.kind {
                NestKind::ForEach => ("[", Some(index), "]"),
                NestKind::Loop => ("@", Some(index), ""),
                NestKind::Workflow => ("", None, ""),
            };
            crate::attempt::KeyScope::instance(self.node, instance, self.index)
        };
        RunSetup {
            options: RunOptions {
                record: self.report,
                report: self.report,
                signals: self.signals.clone(),
                ..RunOptions::default()
            },
            path,
            sink: self.sink.clone(),
            pool: Some(Arc::clone(&self.pool)),
            instance: true,
            compensations: &[],
            compensates: &[],
            hook: None,
            groups: self.groups.clone(),
            #[cfg(feature = "durable")]
            keys,
        }
    }
}

/// `setup` with a mailbox for `graph`'s signals (the runner's, or a new private one), and that
/// mailbox: what the generated code of a workflow with `Signal` steps starts with.
pub fn with_mailbox(mut setup: RunSetup, graph: &'static Graph) -> (RunSetup, Arc<Mailbox>) {
    let mailbox = setup
        .options
        .signals
        .get_or_insert_with(|| Mailbox::new(graph.plan.control.signals))
        .clone();
    (setup, mailbox)
}
