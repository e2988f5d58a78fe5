//! The recording calls of the runtime without feature `metrics`: empty, and inlined away.

use std::borrow::Cow;

use crate::events::Event;

/// A workflow's name as a label value: nothing without the feature.
#[derive(Clone, Debug)]
pub(crate) struct Workflow;

impl Workflow {
    #[inline(always)]
    pub(crate) fn of(_name: fn() -> Cow<'static, str>) -> Workflow {
        Workflow
    }
}

#[inline(always)]
pub(crate) fn run_started(_name: fn() -> Cow<'static, str>) {}

#[inline(always)]
pub(crate) fn run_finished(_workflow: &Workflow, _status: &'static str) {}

#[inline(always)]
pub(crate) fn run_terminated(_workflow: &str) {}

#[inline(always)]
pub(crate) fn task_claimed(_workflow: &str) {}

#[inline(always)]
pub(crate) fn task_lost(_workflow: &str) {}

#[inline(always)]
pub(crate) fn store_retry(_operation: &'static str) {}

#[inline(always)]
pub(crate) fn run_queue_lag(_workflow: &str, _due_ms: u64, _now_ms: u64) {}

#[inline(always)]
pub(crate) fn task_queue_lag(_workflow: &str, _ready_ms: u64, _claimed_ms: u64) {}

/// Nothing in flight is counted without the feature.
pub(crate) struct InFlight;

impl InFlight {
    #[inline(always)]
    pub(crate) fn task(_workflow: &str) -> InFlight {
        InFlight
    }
}

/// A durable run's meter: nothing without the feature.
pub(crate) struct RunMeter;

impl RunMeter {
    #[inline(always)]
    pub(crate) fn new(_name: fn() -> Cow<'static, str>) -> RunMeter {
        RunMeter
    }

    #[inline(always)]
    pub(crate) fn replayed(&mut self, _event: &Event) {}

    #[inline(always)]
    pub(crate) fn recorded(&mut self, _event: &Event) {}

    #[inline(always)]
    pub(crate) fn committing(&mut self) {}

    #[inline(always)]
    pub(crate) fn committed(&mut self) {}

    #[inline(always)]
    pub(crate) fn finished(&self, _status: &'static str) {}
}
