//! What a run did: per-node statuses, attempts, times and errors, and views of them: a table, a
//! Chrome trace, a Mermaid gantt chart and the Flow Algorithm's trace matrix.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt::{self, Write as _};
use std::sync::Arc;
use std::time::Duration;

use crate::error::WorkflowError;
use crate::events::{EventKind, EventLog, RunId};
use crate::graph::Graph;
use crate::path::{NestKind, NodePath};
use crate::status::NodeStatus;

mod summary;

pub use summary::NestReport;
pub(crate) use summary::Summary;

/// What happened to one node in a run.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct NodeReport {
    /// The node's name.
    pub name: &'static str,
    /// The display name of the `#[operation]` the node called, if it called one.
    pub operation: Option<&'static str>,
    /// Its final status.
    pub status: NodeStatus,
    /// How many attempts it made: 0 if it never ran, more than 1 if it was retried.
    pub attempts: u32,
    /// The error of each failed attempt that was retried, in order.
    pub failed_attempts: Vec<Arc<str>>,
    /// Its error, rendered, when it failed or was aborted.
    pub error: Option<Arc<str>>,
    /// When its first attempt started, from the run's start (when the run recorded events).
    pub started: Option<Duration>,
    /// When it settled, from the run's start (when the run recorded events and it ran).
    pub ended: Option<Duration>,
    /// For a withdrawn node, the node whose decision withdrew it: the gate that fired, the
    /// `Cancel` or `Terminate` step (when the run recorded events).
    pub withdrawn_by: Option<&'static str>,
}

impl NodeReport {
    /// How long it ran, from its first attempt's start to its end.
    pub fn duration(&self) -> Option<Duration> {
        Some(self.ended?.saturating_sub(self.started?))
    }
}

/// What happened to every node of a finished run.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Report {
    workflow: &'static str,
    run: Option<RunId>,
    succeeded: bool,
    elapsed: Option<Duration>,
    nodes: Vec<NodeReport>,
    nests: Vec<NestReport>,
    compensations: Vec<crate::compensation::Compensation>,
    log: EventLog,
    #[cfg_attr(feature = "serde", serde(skip))]
    graph: &'static Graph,
    #[cfg_attr(feature = "serde", serde(skip))]
    #[cfg_attr(not(feature = "durable"), allow(dead_code))]
    hook: HookEnd,
}

/// What a run's hook gave back when the run ended (see `scheduler/hook.rs`), for the code that
/// attached the hook to take with [`Report::take_hook_end`]; nothing for a run without one. A
/// clone of the report does not carry it.
#[derive(Default)]
pub(crate) struct HookEnd(Option<Box<dyn std::any::Any + Send>>);

impl HookEnd {
    #[cfg_attr(not(feature = "durable"), allow(dead_code))]
    pub(crate) fn new<T: std::any::Any + Send>(value: T) -> HookEnd {
        HookEnd(Some(Box::new(value)))
    }
}

impl Clone for HookEnd {
    fn clone(&self) -> HookEnd {
        HookEnd(None)
    }
}

impl fmt::Debug for HookEnd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() {
            "HookEnd(..)"
        } else {
            "HookEnd"
        })
    }
}

// SAFETY: the value is reached only through `&mut HookEnd` (`Report::take_hook_end`), never
// through `&HookEnd`, so sharing `&HookEnd` between threads shares nothing of it.
unsafe impl Sync for HookEnd {}

/// The parts a [`Report`] is made of, gathered by the scheduler.
pub(crate) struct ReportParts {
    pub graph: &'static Graph,
    pub run: Option<RunId>,
    pub succeeded: bool,
    pub elapsed: Option<Duration>,
    pub nodes: Vec<NodeReport>,
    pub nests: Vec<NestReport>,
    pub compensations: Vec<crate::compensation::Compensation>,
    pub log: Option<EventLog>,
    pub hook: HookEnd,
}

impl Report {
    pub(crate) fn new(parts: ReportParts) -> Self {
        let mut nodes = parts.nodes;
        let log = parts.log.unwrap_or_default();
        for event in log.events().iter().filter(|e| e.path.is_none()) {
            let Some(node) = event.node.and_then(|n| nodes.get_mut(n as usize)) else {
                continue;
            };
            match event.kind {
                EventKind::Requested if node.started.is_none() => node.started = Some(event.at),
                // A decision starts and ends in the instant its test runs, a gate in the
                // instant it fires (its `Won`, then its `Completed`), as does any node that
                // completes without a request.
                EventKind::Completed { branch: Some(_) } | EventKind::Won { .. } => {
                    node.started = Some(event.at);
                    node.ended = Some(event.at);
                }
                EventKind::Completed { .. } if node.started.is_none() => {
                    node.started = Some(event.at);
                    node.ended = Some(event.at);
                }
                EventKind::Completed { .. }
                | EventKind::Failed { .. }
                | EventKind::Aborted { .. }
                | EventKind::Withdrawn { .. }
                    if node.started.is_some() =>
                {
                    node.ended = Some(event.at)
                }
                _ => {}
            }
            if let EventKind::Withdrawn { cause } = event.kind {
                node.withdrawn_by = Some(cause);
            }
        }
        Report {
            workflow: parts.graph.name,
            run: parts.run,
            succeeded: parts.succeeded,
            elapsed: parts.elapsed,
            nodes,
            nests: parts.nests,
            compensations: parts.compensations,
            log,
            graph: parts.graph,
            hook: parts.hook,
        }
    }

    /// The report of a nest instance whose end a durable run restored from its store: it did
    /// not run in this process, so it has no node rows and no events.
    #[cfg(feature = "durable")]
    pub(crate) fn restored(graph: &'static Graph, succeeded: bool) -> Report {
        Report::new(ReportParts {
            graph,
            run: None,
            succeeded,
            elapsed: None,
            nodes: Vec::new(),
            nests: Vec::new(),
            compensations: Vec::new(),
            log: None,
            hook: HookEnd::default(),
        })
    }

    /// Takes what the run's hook gave back, if it is a `T`.
    #[cfg_attr(not(feature = "durable"), allow(dead_code))]
    pub(crate) fn take_hook_end<T: std::any::Any>(&mut self) -> Option<T> {
        let value = self.hook.0.take()?;
        match value.downcast::<T>() {
            Ok(value) => Some(*value),
            Err(value) => {
                self.hook.0 = Some(value);
                None
            }
        }
    }

    /// The workflow's name.
    pub fn workflow(&self) -> &'static str {
        self.workflow
    }

    /// The run's id, when it recorded events.
    pub fn run(&self) -> Option<RunId> {
        self.run
    }

    /// Whether the run succeeded.
    pub fn succeeded(&self) -> bool {
        self.succeeded
    }

    /// How long the run took, when it recorded events.
    pub fn elapsed(&self) -> Option<Duration> {
        self.elapsed
    }

    /// Every node, in node-id order (the order of the `GRAPH` constant).
    pub fn nodes(&self) -> &[NodeReport] {
        &self.nodes
    }

    /// The report of the node called `name`.
    pub fn node(&self, name: &str) -> Option<&NodeReport> {
        self.nodes.iter().find(|n| n.name == name)
    }

    /// What the failed run did to undo its completed steps (`compensate = ..` options), in the
    /// order it did it: empty for a run that succeeded or had nothing to compensate.
    pub fn compensations(&self) -> &[crate::compensation::Compensation] {
        &self.compensations
    }

    /// What each nest node that started (a `ForEach`, a `Loop`, a sub-workflow step) did with
    /// its instances, in node order.
    pub fn nests(&self) -> &[NestReport] {
        &self.nests
    }

    /// What the nest node called `name` did with its instances; for a sub-workflow step,
    /// [`NestReport::report`] is the child run's whole report.
    pub fn nest(&self, name: &str) -> Option<&NestReport> {
        self.nests.iter().find(|n| n.node == name)
    }

    /// The final status of the node called `name`.
    pub fn status(&self, name: &str) -> Option<NodeStatus> {
        self.node(name).map(|n| n.status)
    }

    /// How many nodes ended with `status`.
    pub fn count(&self, status: NodeStatus) -> usize {
        self.nodes.iter().filter(|n| n.status == status).count()
    }

    /// The total number of attempts of all operations.
    pub fn attempts(&self) -> u32 {
        self.nodes.iter().map(|n| n.attempts).sum()
    }

    /// The run's event log (empty when the run recorded none).
    pub fn log(&self) -> &EventLog {
        &self.log
    }

    /// The static graph of the workflow that ran.
    pub fn graph(&self) -> &'static Graph {
        self.graph
    }

    /// The workflow's graph in DOT with every node filled by its status in this run.
    pub fn to_dot(&self) -> String {
        self.graph.render_dot(Some(&self.statuses()))
    }

    /// The workflow's graph in Mermaid with a class (and colour) per status in this run.
    pub fn to_mermaid(&self) -> String {
        self.graph.render_mermaid(Some(&self.statuses()))
    }

    fn statuses(&self) -> Vec<NodeStatus> {
        self.nodes.iter().map(|n| n.status).collect()
    }

    /// The bars of the run's timeline: every node of the workflow that ran, by node id, then
    /// every node of a nest instance that ran (`charge[3]/charge`), in the order it started.
    fn bars(&self) -> Vec<Bar<'_>> {
        let mut bars: Vec<Bar<'_>> = self
            .nodes
            .iter()
            .enumerate()
            .filter_map(|(id, node)| {
                Some(Bar {
                    id,
                    name: Cow::Borrowed(node.name),
                    status: node.status,
                    start: node.started?,
                    end: node.ended,
                    attempts: node.attempts,
                    error: node.error.as_deref(),
                    nested: None,
                })
            })
            .collect();
        let own = bars.len();
        // A nested node's record: (path, node in its body) -> its bar.
        let mut open: HashMap<(&NodePath, u32), usize> = HashMap::new();
        for event in &self.log {
            let (Some(path), Some(node)) = (&event.path, event.node) else {
                continue;
            };
            let bar = match event.kind {
                EventKind::Requested | EventKind::Completed { branch: Some(_) } => {
                    *open.entry((path, node)).or_insert_with(|| {
                        bars.push(Bar {
                            id: 0,
                            name: Cow::Owned(path.name_of(event.node_name.unwrap_or("?"))),
                            status: NodeStatus::Running,
                            start: event.at,
                            end: None,
                            attempts: 0,
                            error: None,
                            nested: Some(path),
                        });
                        bars.len() - 1
                    })
                }
                _ => match open.get(&(path, node)) {
                    Some(&bar) => bar,
                    None => continue,
                },
            };
            let bar = &mut bars[bar];
            match &event.kind {
                EventKind::Requested => bar.attempts += 1,
                EventKind::Completed { branch } => {
                    bar.status = NodeStatus::Completed;
                    bar.end = Some(event.at);
                    if branch.is_some() {
                        bar.attempts = 1;
                    }
                }
                EventKind::Failed { error } => {
                    bar.status = NodeStatus::Failed;
                    bar.end = Some(event.at);
                    bar.error = Some(error);
                }
                EventKind::Aborted { .. } => {
                    bar.status = NodeStatus::Aborted;
                    bar.end = Some(event.at);
                }
                EventKind::Withdrawn { .. } => {
                    bar.status = NodeStatus::Withdrawn;
                    bar.end = Some(event.at);
                }
                _ => {}
            }
        }
        debug_assert!(bars[..own].iter().all(|b| b.nested.is_none()));
        bars
    }

    /// The run as an SVG timeline: one bar per node that ran, coloured by status, on a
    /// millisecond axis; the nodes of nest instances follow, by full name (`charge[3]/charge`).
    /// Empty of bars when the run recorded no events.
    pub fn to_svg_timeline(&self) -> String {
        const ROW: usize = 22;
        const LEFT: usize = 170;
        const WIDTH: usize = 620;
        let rows = self.bars();
        let total = self
            .elapsed
            .or_else(|| rows.iter().filter_map(|n| n.end).max())
            .unwrap_or_default()
            .as_secs_f64()
            .max(1e-6);
        let height = (rows.len() + 2) * ROW + 10;
        let x = |d: Duration| LEFT as f64 + d.as_secs_f64() / total * WIDTH as f64;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{height}\" font-family=\"Helvetica, Arial, sans-serif\" font-size=\"12\">",
            LEFT + WIDTH + 20
        );
        let _ = writeln!(out, "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>");
        let _ = writeln!(
            out,
            "<text x=\"4\" y=\"15\" font-weight=\"bold\">{} ({})</text>",
            xml(self.workflow),
            if self.succeeded {
                "succeeded"
            } else {
                "failed"
            }
        );
        for (i, bar) in rows.iter().enumerate() {
            let y = (i + 1) * ROW + 4;
            let start = bar.start;
            let end = bar.end.unwrap_or(start);
            let x0 = x(start);
            let w = (x(end) - x0).max(2.0);
            let _ = writeln!(
                out,
                "<text x=\"4\" y=\"{}\">{}</text>",
                y + 14,
                xml(&bar.name)
            );
            let _ = writeln!(
                out,
                "<rect x=\"{x0:.1}\" y=\"{}\" width=\"{w:.1}\" height=\"{}\" fill=\"{}\" stroke=\"#555\"><title>{} {}: {:.1} ms, {} attempt(s)</title></rect>",
                y + 2,
                ROW - 6,
                crate::graph::status_color(bar.status),
                xml(&bar.name),
                bar.status,
                bar.end
                    .map_or(0.0, |end| end.saturating_sub(start).as_secs_f64() * 1e3),
                bar.attempts,
            );
        }
        let axis_y = (rows.len() + 1) * ROW + 8;
        let _ = writeln!(
            out,
            "<line x1=\"{LEFT}\" y1=\"{axis_y}\" x2=\"{}\" y2=\"{axis_y}\" stroke=\"#333\"/>",
            LEFT + WIDTH
        );
        for tick in 0..=4 {
            let at = total * tick as f64 / 4.0;
            let tx = LEFT as f64 + WIDTH as f64 * tick as f64 / 4.0;
            let _ = writeln!(
                out,
                "<text x=\"{tx:.1}\" y=\"{}\" text-anchor=\"middle\">{:.0} ms</text>",
                axis_y + 14,
                at * 1e3
            );
        }
        out.push_str("</svg>\n");
        out
    }

    /// The run as Chrome trace-event JSON: one complete event (`"ph": "X"`) per node that ran,
    /// in microseconds. The workflow's own nodes each have a thread of their own (`tid` = node
    /// id + 1); the nodes of nest instances (`charge[3]/charge`, category `nest`) share as few
    /// threads as their overlaps allow, after those. Open it in Perfetto (ui.perfetto.dev) or
    /// `chrome://tracing`.
    pub fn to_chrome_trace(&self) -> String {
        let mut out = String::from("{\"traceEvents\":[");
        let mut first = true;
        // For the nested bars: when each lane is free again.
        let mut lanes: Vec<Duration> = Vec::new();
        for bar in self.bars() {
            let Some(end) = bar.end else {
                continue;
            };
            let tid = match bar.nested {
                None => bar.id + 1,
                Some(_) => {
                    let lane = match lanes.iter().position(|&free| free <= bar.start) {
                        Some(lane) => lane,
                        None => {
                            lanes.push(Duration::ZERO);
                            lanes.len() - 1
                        }
                    };
                    lanes[lane] = end;
                    self.nodes.len() + 1 + lane
                }
            };
            if !first {
                out.push(',');
            }
            first = false;
            let _ = write!(
                out,
                "{{\"name\":{},\"cat\":\"{}\",\"ph\":\"X\",\"ts\":{},\"dur\":{},\"pid\":1,\"tid\":{tid},\"args\":{{\"status\":\"{}\",\"attempts\":{}",
                json_string(&bar.name),
                if bar.nested.is_some() { "nest" } else { "node" },
                bar.start.as_micros(),
                end.saturating_sub(bar.start).as_micros(),
                bar.status,
                bar.attempts,
            );
            if let Some(error) = bar.error {
                let _ = write!(out, ",\"error\":{}", json_string(error));
            }
            out.push_str("}}");
        }
        let _ = write!(
            out,
            "],\"displayTimeUnit\":\"ms\",\"otherData\":{{\"workflow\":{},\"succeeded\":{}}}}}",
            json_string(self.workflow),
            self.succeeded
        );
        out
    }

    /// The run as a Mermaid gantt chart (times in milliseconds from the run's start): the
    /// workflow's nodes in section `nodes`, then a section per nest node with the nodes of its
    /// instances (`charge[3]/charge`).
    pub fn to_mermaid_gantt(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "gantt\n    title {}\n    dateFormat x\n    axisFormat %L ms",
            self.workflow
        );
        let _ = writeln!(out, "    section nodes");
        let bars = self.bars();
        let mut sections: Vec<(&str, Vec<&Bar<'_>>)> = Vec::new();
        for bar in &bars {
            let Some(path) = bar.nested else {
                gantt_bar(&mut out, bar);
                continue;
            };
            let section = path.steps().first().map_or("nested", |step| step.node);
            match sections.iter_mut().find(|(name, _)| *name == section) {
                Some((_, members)) => members.push(bar),
                None => sections.push((section, vec![bar])),
            }
        }
        for (section, members) in sections {
            let _ = writeln!(out, "    section {section}");
            for bar in members {
                gantt_bar(&mut out, bar);
            }
        }
        out
    }

    /// The trace matrix of "The Flow Algorithm": one row per node plus the implicit start (first
    /// row) and end (last row), one column per start or end in time order, `-1` for a start and
    /// `+1` for an end. Nodes that never ran have all-zero rows. Empty when the run recorded no
    /// events.
    pub fn trace_matrix(&self) -> TraceMatrix {
        let mut rows = Vec::with_capacity(self.nodes.len() + 2);
        rows.push("start");
        rows.extend(self.nodes.iter().map(|n| n.name));
        rows.push("end");
        if self.log.is_empty() {
            return TraceMatrix {
                rows,
                columns: Vec::new(),
            };
        }
        let end_row = rows.len() - 1;
        let mut columns: Vec<(usize, i8)> = vec![(0, -1), (0, 1)];
        let mut seen_start = vec![false; self.nodes.len()];
        for event in self.log.events().iter().filter(|e| e.path.is_none()) {
            let Some(node) = event.node.map(|n| n as usize) else {
                continue;
            };
            match event.kind {
                EventKind::Requested if !seen_start[node] => {
                    seen_start[node] = true;
                    columns.push((node + 1, -1));
                }
                EventKind::Completed { .. }
                | EventKind::Failed { .. }
                | EventKind::Aborted { .. }
                | EventKind::Withdrawn { .. }
                    if seen_start[node] =>
                {
                    columns.push((node + 1, 1));
                }
                EventKind::Completed { branch: Some(_) } => {
                    // A decision starts and ends in the same instant.
                    seen_start[node] = true;
                    columns.push((node + 1, -1));
                    columns.push((node + 1, 1));
                }
                _ => {}
            }
        }
        columns.push((end_row, -1));
        columns.push((end_row, 1));
        TraceMatrix {
            rows,
            columns: columns
                .into_iter()
                .map(|(row, value)| TraceColumn { row, value })
                .collect(),
        }
    }

    /// The report as JSON (with the `serde` feature).
    #[cfg(feature = "serde")]
    pub fn to_json(&self) -> Result<String, serde_json::Error> {
        serde_json::to_string_pretty(self)
    }
}

/// One bar of a timeline: a node that ran, of the workflow or of a nest instance.
struct Bar<'a> {
    /// The node's id, for a node of the workflow.
    id: usize,
    name: Cow<'a, str>,
    status: NodeStatus,
    start: Duration,
    end: Option<Duration>,
    attempts: u32,
    error: Option<&'a str>,
    /// The nest instance, for a node of one.
    nested: Option<&'a NodePath>,
}

/// One line of a gantt chart.
fn gantt_bar(out: &mut String, bar: &Bar<'_>) {
    let Some(end) = bar.end else {
        return;
    };
    let (tag, note) = match bar.status {
        NodeStatus::Failed | NodeStatus::Aborted => ("crit, ", ""),
        // Cut short: drawn as done, up to the moment it was withdrawn.
        NodeStatus::Withdrawn => ("done, ", " (withdrawn)"),
        _ => ("", ""),
    };
    // Mermaid needs a non-empty bar.
    let end_ms = end.as_millis().max(bar.start.as_millis() + 1);
    let _ = writeln!(
        out,
        "    {}{note} : {tag}{}, {}",
        bar.name.replace(':', "#colon;"),
        bar.start.as_millis(),
        end_ms
    );
}

/// One column of a [`TraceMatrix`]: the single non-zero entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceColumn {
    /// The row (0 is start, the last is end).
    pub row: usize,
    /// `-1` for a start, `+1` for an end.
    pub value: i8,
}

/// The trace of a run as in "The Flow Algorithm": rows are tasks (start, nodes, end), columns
/// are time steps, each with a single `-1` (start) or `+1` (end).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceMatrix {
    /// The row names: `start`, every node, `end`.
    pub rows: Vec<&'static str>,
    /// The columns, in time order.
    pub columns: Vec<TraceColumn>,
}

impl TraceMatrix {
    /// The entry at `row`, `column`.
    pub fn get(&self, row: usize, column: usize) -> i8 {
        match self.columns.get(column) {
            Some(c) if c.row == row => c.value,
            _ => 0,
        }
    }

    /// The sum of a row: 0 for every task that started and ended.
    pub fn row_sum(&self, row: usize) -> i32 {
        self.columns
            .iter()
            .filter(|c| c.row == row)
            .map(|c| i32::from(c.value))
            .sum()
    }

    /// The column where `row` starts, and where it ends.
    pub fn span(&self, row: usize) -> Option<(usize, usize)> {
        let start = self
            .columns
            .iter()
            .position(|c| c.row == row && c.value == -1)?;
        let end = self
            .columns
            .iter()
            .position(|c| c.row == row && c.value == 1)?;
        Some((start, end))
    }
}

impl fmt::Display for TraceMatrix {
    /// The matrix as the paper prints it: a row name, then one column per time step.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let width = self.rows.iter().map(|r| r.len()).max().unwrap_or(1);
        for (row, name) in self.rows.iter().enumerate() {
            write!(f, "{name:<width$}")?;
            for column in 0..self.columns.len() {
                write!(f, " {:>2}", self.get(row, column))?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

fn xml(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn json_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

impl fmt::Display for Report {
    /// A table: one row per node with its status, attempts, times and error, then totals. A
    /// nest node's row is followed by one line that groups its instances
    /// (`charge[0..10000]  9,987 completed · 13 failed (charge[17]: card declined; …)`); a
    /// sub-workflow step's row is followed by its child run's own table, indented.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let width = self
            .nodes
            .iter()
            .map(|n| n.name.len())
            .max()
            .unwrap_or(4)
            .max(4);
        let ms = |d: Option<Duration>| {
            d.map_or(String::from("-"), |d| {
                format!("{:.1}", d.as_secs_f64() * 1e3)
            })
        };
        writeln!(
            f,
            "{:<width$}  {:<9}  {:>8}  {:>9}  {:>9}  error",
            "node", "status", "attempts", "start ms", "took ms"
        )?;
        for node in &self.nodes {
            writeln!(
                f,
                "{:<width$}  {:<9}  {:>8}  {:>9}  {:>9}  {}",
                node.name,
                node.status,
                node.attempts,
                ms(node.started),
                ms(node.duration()),
                WhyCell(node)
            )?;
            // A nest node's instances: one grouped line, whatever their number.
            if !self.nests.is_empty()
                && let Some(nest) = self.nest(node.name)
            {
                writeln!(f, "  {nest}")?;
                // A sub-workflow step's child run: its own table, indented under the step.
                if nest.kind == NestKind::Workflow
                    && let Some(child) = nest.report()
                {
                    for line in child.to_string().lines() {
                        writeln!(f, "  | {line}")?;
                    }
                }
            }
        }
        write!(
            f,
            "{}: {} in {} ms: {} completed, {} failed, {} aborted, {} skipped, {} attempts",
            self.workflow,
            if self.succeeded {
                "succeeded"
            } else {
                "failed"
            },
            ms(self.elapsed),
            self.count(NodeStatus::Completed),
            self.count(NodeStatus::Failed),
            self.count(NodeStatus::Aborted),
            self.count(NodeStatus::Skipped),
            self.attempts(),
        )?;
        // Only runs with races, picks or cancels withdraw nodes: the others keep their line.
        let withdrawn = self.count(NodeStatus::Withdrawn);
        if withdrawn > 0 {
            write!(f, ", {withdrawn} withdrawn")?;
        }
        writeln!(f)
    }
}

/// The last column of a report's table: a node's error, or what withdrew it.
struct WhyCell<'a>(&'a NodeReport);

impl fmt::Display for WhyCell<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.0.error, self.0.withdrawn_by) {
            (Some(error), _) => f.write_str(error),
            (None, Some(cause)) => write!(f, "withdrawn by `{cause}`"),
            (None, None) => Ok(()),
        }
    }
}

/// The result of a run together with its [`Report`], from a workflow's `runner()`.
#[derive(Debug)]
#[must_use = "an outcome holds the run's result, which may be an error"]
pub struct Outcome<T> {
    /// The workflow's output, or why the run failed.
    pub result: Result<T, WorkflowError>,
    /// What happened to every node.
    pub report: Report,
}

impl<T> Outcome<T> {
    /// The result alone.
    pub fn into_result(self) -> Result<T, WorkflowError> {
        self.result
    }
}
