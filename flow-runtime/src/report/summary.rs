//! The summary of a nest node's instances, folded as each one ends, and the [`NestReport`] it
//! becomes: counts, the first failures, durations and a few whole reports. Its size does not
//! depend on the number of instances.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::Report;
use crate::error::{NodeError, WorkflowError};
use crate::path::{NestKind, PathStep};

/// How many failures a [`NestReport`] lists (with their instance); the rest are counted.
pub(crate) const FAILURES_KEPT: usize = 100;

/// How many failed instances keep their whole [`Report`].
pub(crate) const FAILED_REPORTS_KEPT: usize = 10;

/// How many durations are kept exactly before they are folded into a histogram.
const EXACT_DURATIONS: usize = 1024;

/// The summary of one nest node's instances, as they end.
pub(crate) struct Summary {
    node: &'static str,
    kind: NestKind,
    started: u64,
    completed: u64,
    failed: u64,
    withdrawn: u64,
    failures: Vec<(u64, Arc<str>)>,
    durations: Durations,
    reports: Vec<(u64, Report)>,
    failed_reports: usize,
}

impl Summary {
    pub(crate) fn new(node: &'static str, kind: NestKind) -> Summary {
        Summary {
            node,
            kind,
            started: 0,
            completed: 0,
            failed: 0,
            withdrawn: 0,
            failures: Vec::new(),
            durations: Durations::default(),
            reports: Vec::new(),
            failed_reports: 0,
        }
    }

    /// An empty summary of the same node.
    pub(crate) fn emptied(&self) -> Summary {
        Summary::new(self.node, self.kind)
    }

    pub(crate) fn started(&mut self, _index: u64) {
        self.started += 1;
    }

    /// Folds instance `index`, started and ended (with `error`, or succeeded) in an earlier
    /// process of a durable run, its end restored from the store: counted as a live one, with
    /// no report or duration (it did not run here).
    #[cfg_attr(not(feature = "durable"), allow(dead_code))]
    pub(crate) fn restored(&mut self, index: u64, error: Option<&WorkflowError>) {
        self.started += 1;
        match error {
            None => self.completed += 1,
            Some(error) => {
                self.failed += 1;
                if self.failures.len() < FAILURES_KEPT {
                    self.failures.push((index, Arc::from(innermost(error))));
                }
            }
        }
    }

    /// Folds `count` instances that succeeded in an earlier process of a durable run and whose
    /// ends a resume did not load (a `Loop`'s iterations before the last one that ended).
    #[cfg_attr(not(feature = "durable"), allow(dead_code))]
    pub(crate) fn restored_succeeded(&mut self, count: u64) {
        self.started += count;
        self.completed += count;
    }

    /// Folds instance `index`, which ended with `error` (or succeeded), and its report, kept
    /// whole when `keep` and it is the first instance or one of the first failed ones.
    pub(crate) fn ended(
        &mut self,
        index: u64,
        error: Option<&WorkflowError>,
        report: Report,
        keep: bool,
    ) {
        match error {
            None => self.completed += 1,
            Some(error) => {
                self.failed += 1;
                if self.failures.len() < FAILURES_KEPT {
                    self.failures.push((index, Arc::from(innermost(error))));
                }
            }
        }
        if let Some(elapsed) = report.elapsed() {
            self.durations.add(elapsed);
        }
        if keep {
            let failed_one = error.is_some() && self.failed_reports < FAILED_REPORTS_KEPT;
            if failed_one {
                self.failed_reports += 1;
            }
            if index == 0 || failed_one {
                self.reports.push((index, report));
            }
        }
    }

    pub(crate) fn withdrawn(&mut self, _index: u64) {
        self.withdrawn += 1;
    }

    /// The report of the instances so far. Instances that started and did not end were cut
    /// short (their driver was dropped): they count as withdrawn.
    pub(crate) fn report(&self) -> NestReport {
        let mut reports = self.reports.clone();
        reports.sort_by_key(|(index, _)| *index);
        NestReport {
            node: self.node,
            kind: self.kind,
            started: self.started,
            completed: self.completed,
            failed: self.failed,
            withdrawn: self
                .started
                .saturating_sub(self.completed + self.failed)
                .max(self.withdrawn),
            failures: self.failures.clone(),
            min: self.durations.min,
            median: self.durations.median(),
            max: self.durations.max,
            reports,
        }
    }

    /// The report, taking the kept reports rather than copying them.
    pub(crate) fn into_report(mut self) -> NestReport {
        let reports = std::mem::take(&mut self.reports);
        let mut report = self.report();
        report.reports = reports;
        report.reports.sort_by_key(|(index, _)| *index);
        report
    }
}

/// The message of the failure at the bottom of `error`: the first node that failed by itself,
/// through nested runs (`card declined`, not "workflow `Charge` failed").
fn innermost(error: &WorkflowError) -> String {
    let mut error = error;
    loop {
        let Some(failure) = error
            .failed()
            .find(|f| !matches!(f.error, NodeError::Cancelled))
        else {
            return error.to_string();
        };
        match &failure.error {
            NodeError::Workflow(inner) => error = inner,
            other => return other.to_string(),
        }
    }
}

/// Instance durations: exact while few, then a log-linear histogram (16 buckets per power of
/// two, so the median is within about 6% of the truth) with the exact minimum and maximum.
#[derive(Default)]
struct Durations {
    exact: Vec<Duration>,
    /// Counts per bucket of nanoseconds, once more than [`EXACT_DURATIONS`] were seen.
    histogram: Vec<u64>,
    count: u64,
    min: Option<Duration>,
    max: Option<Duration>,
}

const SUB_BUCKETS: u64 = 16;
const BUCKETS: usize = (SUB_BUCKETS + (64 - 4) * SUB_BUCKETS) as usize;

fn bucket(nanos: u64) -> usize {
    if nanos < SUB_BUCKETS {
        return nanos as usize;
    }
    let exponent = 63 - u64::from(nanos.leading_zeros());
    let mantissa = (nanos >> (exponent - 4)) & (SUB_BUCKETS - 1);
    (SUB_BUCKETS + (exponent - 4) * SUB_BUCKETS + mantissa) as usize
}

/// The middle of bucket `b`, in nanoseconds.
fn bucket_middle(b: usize) -> u64 {
    let b = b as u64;
    if b < SUB_BUCKETS {
        return b;
    }
    let exponent = (b - SUB_BUCKETS) / SUB_BUCKETS + 4;
    let mantissa = (b - SUB_BUCKETS) % SUB_BUCKETS;
    let low = (SUB_BUCKETS + mantissa) << (exponent - 4);
    let width = 1u64 << (exponent - 4);
    low.saturating_add(width / 2)
}

impl Durations {
    fn add(&mut self, d: Duration) {
        self.count += 1;
        self.min = Some(self.min.map_or(d, |m| m.min(d)));
        self.max = Some(self.max.map_or(d, |m| m.max(d)));
        if self.histogram.is_empty() && self.exact.len() < EXACT_DURATIONS {
            self.exact.push(d);
            return;
        }
        if self.histogram.is_empty() {
            self.histogram = vec![0; BUCKETS];
            for d in std::mem::take(&mut self.exact) {
                self.histogram[bucket(nanos(d))] += 1;
            }
        }
        self.histogram[bucket(nanos(d))] += 1;
    }

    /// The lower median.
    fn median(&self) -> Option<Duration> {
        if self.count == 0 {
            return None;
        }
        if self.histogram.is_empty() {
            let mut sorted = self.exact.clone();
            sorted.sort_unstable();
            return sorted.get((sorted.len() - 1) / 2).copied();
        }
        let rank = (self.count - 1) / 2;
        let mut seen = 0;
        for (b, &n) in self.histogram.iter().enumerate() {
            seen += n;
            if seen > rank {
                let middle = Duration::from_nanos(bucket_middle(b));
                return Some(middle.clamp(self.min?, self.max?));
            }
        }
        self.max
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// What a nest node's instances did: one `ForEach`, `Loop` or sub-workflow step of a run, as
/// [`Report::nests`] lists them.
///
/// Its size does not grow with the number of instances: it counts them, lists the first
/// 100 failures, summarises durations, and keeps the whole [`Report`] of
/// the first instance (index 0: a sub-workflow step's only one) and of the first 10 failed
/// ones, when the run built a report.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct NestReport {
    /// The nest node's name.
    pub node: &'static str,
    /// What kind of nest it is.
    pub kind: NestKind,
    /// How many instances started.
    pub started: u64,
    /// How many completed.
    pub completed: u64,
    /// How many failed.
    pub failed: u64,
    /// How many were cut short: withdrawn by the node (`min`, a failure with
    /// `on_failure = fail_fast`, a `Complete` step) or dropped with it.
    pub withdrawn: u64,
    /// The first failures (up to 100), in the order they happened: the instance's index and
    /// the message of the error at the bottom of its failure.
    pub failures: Vec<(u64, Arc<str>)>,
    /// The shortest instance run (when instances recorded their time).
    pub min: Option<Duration>,
    /// The median instance run: exact up to 1,024 instances, within about 6% beyond.
    pub median: Option<Duration>,
    /// The longest instance run.
    pub max: Option<Duration>,
    /// The whole reports kept, by instance index: the first instance and the first failed
    /// ones (empty when the run built no report).
    pub reports: Vec<(u64, Report)>,
}

impl NestReport {
    /// The whole report of instance `index`, if it was kept.
    pub fn instance(&self, index: u64) -> Option<&Report> {
        self.reports
            .iter()
            .find(|(i, _)| *i == index)
            .map(|(_, report)| report)
    }

    /// The report of the first instance: a sub-workflow step's child run.
    pub fn report(&self) -> Option<&Report> {
        self.instance(0)
    }

    /// How many instances failed beyond those [`NestReport::failures`] lists.
    pub fn more_failures(&self) -> u64 {
        self.failed.saturating_sub(self.failures.len() as u64)
    }

    fn step(&self, index: u64) -> PathStep {
        PathStep {
            node: self.node,
            kind: self.kind,
            index,
        }
    }
}

/// How many failures the one-line form names before "and N more".
const NAMED: usize = 3;

/// One line: `charge[0..10000]  9,987 completed · 13 failed (charge[17]: card declined;
/// charge[203]: timed out after 2s; charge[511]: card declined; and 10 more)`.
impl fmt::Display for NestReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            NestKind::ForEach => write!(f, "{}[0..{}]", self.node, self.started)?,
            NestKind::Loop => write!(f, "{}@0..{}", self.node, self.started)?,
            NestKind::Workflow => f.write_str(self.node)?,
        }
        write!(f, "  {} completed", Thousands(self.completed))?;
        if self.failed > 0 {
            write!(f, " · {} failed (", Thousands(self.failed))?;
            for (i, (index, message)) in self.failures.iter().take(NAMED).enumerate() {
                if i > 0 {
                    f.write_str("; ")?;
                }
                write!(f, "{}: {message}", self.step(*index))?;
            }
            let named = self.failures.len().min(NAMED) as u64;
            if self.failed > named {
                write!(f, "; and {} more", Thousands(self.failed - named))?;
            }
            f.write_str(")")?;
        }
        if self.withdrawn > 0 {
            write!(f, " · {} withdrawn", Thousands(self.withdrawn))?;
        }
        Ok(())
    }
}

/// A count with thousands separators: `9,987`.
struct Thousands(u64);

impl fmt::Display for Thousands {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let digits = self.0.to_string();
        for (i, c) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i).is_multiple_of(3) {
                f.write_str(",")?;
            }
            write!(f, "{c}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_are_separated() {
        assert_eq!(Thousands(0).to_string(), "0");
        assert_eq!(Thousands(999).to_string(), "999");
        assert_eq!(Thousands(9_987).to_string(), "9,987");
        assert_eq!(Thousands(1_000_000).to_string(), "1,000,000");
    }

    #[test]
    fn durations_are_exact_while_few_and_close_beyond() {
        let mut few = Durations::default();
        for ms in [5, 1, 3] {
            few.add(Duration::from_millis(ms));
        }
        assert_eq!(few.median(), Some(Duration::from_millis(3)));
        assert_eq!(few.min, Some(Duration::from_millis(1)));
        assert_eq!(few.max, Some(Duration::from_millis(5)));

        let mut many = Durations::default();
        for us in 1..=10_001u64 {
            many.add(Duration::from_micros(us));
        }
        assert!(many.exact.is_empty(), "folded into the histogram");
        assert_eq!(many.histogram.len(), BUCKETS, "bounded, whatever the count");
        let median = many.median().expect("some").as_secs_f64();
        let truth = Duration::from_micros(5_001).as_secs_f64();
        assert!((median - truth).abs() / truth < 0.07, "{median} vs {truth}");
        assert_eq!(many.min, Some(Duration::from_micros(1)));
        assert_eq!(many.max, Some(Duration::from_micros(10_001)));
    }

    #[test]
    fn buckets_are_monotonic_and_cover_every_value() {
        let mut last = 0;
        for nanos in (0..100_000u64).chain([u64::MAX / 2, u64::MAX]) {
            let b = bucket(nanos);
            assert!(b >= last && b < BUCKETS, "{nanos}");
            last = b;
        }
        for b in 16..BUCKETS - 1 {
            assert_eq!(bucket(bucket_middle(b)), b, "the middle of {b} is in it");
        }
    }
}
