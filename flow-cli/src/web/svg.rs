//! The pictures of the web view, drawn here as SVG: a run's graph with each step in its
//! status's colour, and the timeline of its attempts. Every name in them is escaped.

use std::collections::HashMap;
use std::fmt::Write as _;

use flowdag_runtime::store::{NodeRow, RunSummary, StoredEvent};

use super::html::esc;

/// A step's status as the pictures and the page's `data-status` attributes name it, from
/// the status the journal's projection gives it (`"timed out"`, `"in backoff"`, …).
pub(crate) fn slug(status: &str) -> &'static str {
    match status {
        "completed" => "completed",
        "won" => "won",
        "failed" => "failed",
        "timed out" => "timed-out",
        "aborted" => "aborted",
        "skipped" => "skipped",
        "withdrawn" => "withdrawn",
        "in backoff" => "backoff",
        "waiting (timer)" | "waiting (signal)" => "waiting",
        "running" | "requested" => "running",
        "compensated" => "compensated",
        _ => "pending",
    }
}

/// The fill of a status ([`slug`]'s names) in the pictures; the stylesheet uses the same.
pub(crate) fn fill(slug: &str) -> &'static str {
    match slug {
        "completed" | "won" | "succeeded" | "compensated" => "#b7e4c7",
        "failed" | "timed-out" => "#f4a6a6",
        "aborted" | "cancelled" => "#f9d29d",
        "skipped" => "#e0e0e0",
        "withdrawn" => "#d9c8f0",
        "stuck" => "#e7b3e0",
        "compensating" => "#fcd9b6",
        "running" => "#a9d6f5",
        "waiting" | "backoff" => "#fff1a8",
        _ => "#ffffff",
    }
}

const NODE_W: u32 = 170;
const NODE_H: u32 = 40;
const GAP_X: u32 = 50;
const GAP_Y: u32 = 18;
const MARGIN: u32 = 12;

/// At most this many characters of a name are drawn in a box (the whole name is its tooltip).
const NAME_CHARS: usize = 22;

fn clip(text: &str, chars: usize) -> String {
    match text.char_indices().nth(chars) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

/// The graph of `nodes`, left to right: a node's column is one more than its furthest
/// predecessor's, and the nodes of a column are ordered by the mean row of their predecessors
/// (a layered layout). `status` gives a node's status by name ([`slug`]); a node it does not
/// name has not started (`pending`).
pub(crate) fn graph(nodes: &[NodeRow], status: &HashMap<&str, &'static str>) -> String {
    let count = nodes.len();
    let index: HashMap<u32, usize> = nodes.iter().enumerate().map(|(i, n)| (n.node, i)).collect();
    let preds: Vec<Vec<usize>> = nodes
        .iter()
        .map(|n| {
            n.preds
                .iter()
                .filter_map(|p| index.get(p).copied())
                .collect()
        })
        .collect();
    // Columns by relaxation: at most `count` rounds, so a stored cycle cannot loop forever.
    let mut column = vec![0usize; count];
    for _ in 0..count {
        let mut changed = false;
        for i in 0..count {
            let want = preds[i]
                .iter()
                .map(|&p| column[p] + 1)
                .max()
                .unwrap_or(0)
                .min(count);
            if want != column[i] {
                column[i] = want;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    let columns = column.iter().max().map_or(0, |m| m + 1);
    let mut row = vec![0f64; count];
    let mut rows_of: Vec<Vec<usize>> = vec![Vec::new(); columns];
    for (c, slot) in rows_of.iter_mut().enumerate() {
        let mut here: Vec<(f64, usize)> = (0..count)
            .filter(|&i| column[i] == c)
            .map(|i| {
                let mean = if preds[i].is_empty() {
                    i as f64
                } else {
                    preds[i].iter().map(|&p| row[p]).sum::<f64>() / preds[i].len() as f64
                };
                (mean, i)
            })
            .collect();
        here.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        for (r, &(_, i)) in here.iter().enumerate() {
            row[i] = r as f64;
        }
        *slot = here.into_iter().map(|(_, i)| i).collect();
    }
    let tallest = rows_of.iter().map(Vec::len).max().unwrap_or(0) as u32;
    let width = MARGIN * 2 + columns as u32 * NODE_W + columns.saturating_sub(1) as u32 * GAP_X;
    let height = MARGIN * 2 + tallest * NODE_H + tallest.saturating_sub(1) * GAP_Y;
    let place = |i: usize| {
        let x = MARGIN + column[i] as u32 * (NODE_W + GAP_X);
        let y = MARGIN + row[i] as u32 * (NODE_H + GAP_Y);
        (x, y)
    };
    let mut svg = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="graph" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" aria-label="the run's graph">"#
    );
    svg.push_str(r##"<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#777"/></marker></defs>"##);
    for (i, ps) in preds.iter().enumerate() {
        let (x2, y2) = place(i);
        for &p in ps {
            let (x1, y1) = place(p);
            let (x1, y1) = (x1 + NODE_W, y1 + NODE_H / 2);
            let y2 = y2 + NODE_H / 2;
            let mid = (x1 + x2) / 2;
            let _ = write!(
                svg,
                r##"<path class="edge" d="M{x1},{y1} C{mid},{y1} {mid},{y2} {x2},{y2}" fill="none" stroke="#777" marker-end="url(#arrow)"/>"##
            );
        }
    }
    for (i, node) in nodes.iter().enumerate() {
        let (x, y) = place(i);
        let state = status.get(node.name.as_str()).copied().unwrap_or("pending");
        let kind = if node.kind.is_empty() {
            "step"
        } else {
            node.kind.as_str()
        };
        // One escaped line each: the name, the call, the settings.
        let mut tip = esc(&format!("{} [{kind}]: {state}", node.name));
        for more in [&node.label, &node.policy] {
            if !more.is_empty() {
                let _ = write!(tip, "&#10;{}", esc(more));
            }
        }
        let _ = write!(
            svg,
            r##"<g class="node" data-node="{name}" data-kind="{kind}" data-status="{state}"><title>{tip}</title><rect x="{x}" y="{y}" width="{NODE_W}" height="{NODE_H}" rx="6" fill="{fill}" stroke="#555"/><text x="{tx}" y="{ty}" text-anchor="middle">{shown}</text><text class="kind" x="{tx}" y="{ky}" text-anchor="middle">{kind}</text></g>"##,
            name = esc(&node.name),
            kind = esc(kind),
            fill = fill(state),
            tx = x + NODE_W / 2,
            ty = y + 17,
            ky = y + 32,
            shown = esc(&clip(&node.name, NAME_CHARS)),
        );
    }
    svg.push_str("</svg>");
    svg
}

/// The most lines a timeline draws.
pub(crate) const TIMELINE_LINES: usize = 300;

/// One line of the timeline: a step (of the run, or of a nest instance, indented), a
/// compensation, or a child run.
struct Line {
    label: String,
    depth: usize,
    /// A child run's line (kept before the steps of nest instances when lines are cut).
    child: bool,
    spans: Vec<Span>,
}

/// One bar: an attempt, from its first event to its last (to the run's latest event while it
/// has not ended).
struct Span {
    from_us: u64,
    to_us: u64,
    slug: &'static str,
    tip: String,
}

/// What ends an attempt, and the status it ends in.
fn ending(kind: &str) -> Option<&'static str> {
    Some(match kind {
        "Completed" | "Compensated" => "completed",
        "Won" => "won",
        "Failed" | "CompensationFailed" => "failed",
        "TimedOut" => "timed-out",
        "Retrying" | "CompensationRetrying" => "backoff",
        "Aborted" => "aborted",
        "Skipped" => "skipped",
        "Withdrawn" => "withdrawn",
        _ => return None,
    })
}

/// The timeline of a run: a line per step and attempt bars on it, the steps of nest instances
/// indented under their instance's path, compensations after the steps, and the run's child
/// runs (`children`, with `run`'s creation time as zero) at the end.
pub(crate) fn timeline(
    run: &RunSummary,
    events: &[StoredEvent],
    children: &[RunSummary],
) -> String {
    let mut lines: Vec<Line> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    // Open attempts: (line, attempt) → its bar's index.
    let mut open: HashMap<(usize, u32), usize> = HashMap::new();
    // An event's time is since the run's start in the process that ran it: a resumed run's
    // clock starts again. Laid end to end, each process's events follow the last one before.
    let mut times = Vec::with_capacity(events.len());
    let (mut offset, mut last) = (0u64, 0u64);
    for event in events {
        if event.at_us.saturating_add(offset) < last {
            offset = last - event.at_us;
        }
        last = event.at_us.saturating_add(offset);
        times.push(last);
    }
    let end_us = last;
    for (event, &at_us) in events.iter().zip(&times) {
        let Some(name) = crate::step_name(event) else {
            continue;
        };
        let undo = crate::is_compensation(&event.kind);
        let key = if undo { format!("↩ {name}") } else { name };
        let depth = event
            .path
            .as_ref()
            .map_or(0, |p| 1 + p.to_string().matches('/').count());
        let line = *index.entry(key.clone()).or_insert_with(|| {
            lines.push(Line {
                label: key,
                depth,
                child: false,
                spans: Vec::new(),
            });
            lines.len() - 1
        });
        let bar = *open.entry((line, event.attempt)).or_insert_with(|| {
            lines[line].spans.push(Span {
                from_us: at_us,
                to_us: end_us,
                slug: "running",
                tip: format!("attempt {}", event.attempt),
            });
            lines[line].spans.len() - 1
        });
        let span = &mut lines[line].spans[bar];
        if event.kind == "TimerSet" || (event.kind == "Requested" && event.node.is_some()) {
            span.slug = match event.kind.as_str() {
                "TimerSet" => "waiting",
                _ => "running",
            };
            span.to_us = if run.status.is_finished() {
                at_us
            } else {
                end_us
            };
        }
        if let Some(slug) = ending(&event.kind) {
            span.slug = slug;
            span.to_us = at_us;
            let _ = write!(span.tip, ": {}", event.kind);
            open.remove(&(line, event.attempt));
        }
    }
    let ms = |run_ms: u64| run_ms.saturating_sub(run.created_ms).saturating_mul(1000);
    for child in children {
        lines.push(Line {
            label: format!("child run {}", child.id),
            depth: 1,
            child: true,
            spans: vec![Span {
                from_us: ms(child.created_ms),
                to_us: ms(child.updated_ms),
                slug: run_slug(child.status.as_str()),
                tip: format!("{}: {}", child.id, child.status),
            }],
        });
    }
    // A run of many nest instances has a line for each of their steps: the picture keeps the
    // first [`TIMELINE_LINES`] and says how many it left out.
    let hidden = lines.len().saturating_sub(TIMELINE_LINES);
    if hidden > 0 {
        // The run's own steps and its child runs first: an instance's steps are the ones cut.
        lines.sort_by_key(|line| usize::from(line.depth > 0 && !line.child));
        lines.truncate(TIMELINE_LINES);
    }
    let total_us = lines
        .iter()
        .flat_map(|l| l.spans.iter().map(|s| s.to_us))
        .max()
        .unwrap_or(0)
        .max(1);
    let (label_w, chart_w, line_h) = (260u32, 640u32, 22u32);
    let width = label_w + chart_w + MARGIN * 2;
    let height = MARGIN * 2 + (lines.len() as u32 + 1) * line_h;
    let mut svg = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="timeline" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" aria-label="the run's timeline">"#
    );
    let x_of = |us: u64| {
        let share = us.min(total_us) as f64 / total_us as f64;
        label_w + MARGIN + (share * f64::from(chart_w)) as u32
    };
    for (n, line) in lines.iter().enumerate() {
        let y = MARGIN + n as u32 * line_h;
        let indent = 6 + 14 * line.depth.min(8) as u32;
        let _ = write!(
            svg,
            r#"<g class="line" data-line="{label}"><text x="{indent}" y="{ty}">{shown}</text>"#,
            label = esc(&line.label),
            ty = y + 15,
            shown = esc(&clip(&line.label, 34)),
        );
        for span in &line.spans {
            let x = x_of(span.from_us);
            let w = x_of(span.to_us).saturating_sub(x).max(3);
            let _ = write!(
                svg,
                r##"<rect class="span" data-status="{slug}" x="{x}" y="{ry}" width="{w}" height="{rh}" rx="3" fill="{fill}" stroke="#555"><title>{tip} ({from:.1} ms to {to:.1} ms)</title></rect>"##,
                slug = span.slug,
                ry = y + 3,
                rh = line_h - 6,
                fill = fill(span.slug),
                tip = esc(&span.tip),
                from = span.from_us as f64 / 1000.0,
                to = span.to_us as f64 / 1000.0,
            );
        }
        svg.push_str("</g>");
    }
    let axis_y = MARGIN + lines.len() as u32 * line_h + 14;
    if hidden > 0 {
        let _ = write!(
            svg,
            r#"<text class="axis more" x="6" y="{axis_y}">{hidden} more lines not drawn</text>"#
        );
    }
    let _ = write!(
        svg,
        r#"<text class="axis" x="{x0}" y="{axis_y}">0</text><text class="axis" x="{x1}" y="{axis_y}" text-anchor="end">{total}</text></svg>"#,
        x0 = label_w + MARGIN,
        x1 = label_w + MARGIN + chart_w,
        total = span_text(total_us),
    );
    svg
}

/// A length of time on the timeline's axis: in ms up to 10 s, then in s, then in min.
fn span_text(us: u64) -> String {
    match us {
        0..10_000_000 => format!("{:.1} ms", us as f64 / 1000.0),
        10_000_000..600_000_000 => format!("{:.1} s", us as f64 / 1_000_000.0),
        _ => format!("{:.1} min", us as f64 / 60_000_000.0),
    }
}

/// A run's status as a [`fill`] name.
pub(crate) fn run_slug(status: &str) -> &'static str {
    match status {
        "succeeded" | "continued" => "succeeded",
        "failed" => "failed",
        "stuck" => "stuck",
        "cancelled" => "cancelled",
        "compensating" => "compensating",
        "running" => "running",
        "waiting" => "waiting",
        _ => "pending",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(node: u32, name: &str, preds: &[u32]) -> NodeRow {
        NodeRow {
            node,
            name: name.to_owned(),
            label: format!("{name}()"),
            fingerprint: 0,
            preds: preds.to_vec(),
            compensate: String::new(),
            kind: "operation".to_owned(),
            policy: String::new(),
        }
    }

    #[test]
    fn a_diamond_is_three_columns_and_its_statuses_are_drawn() {
        let nodes = [
            row(0, "a", &[]),
            row(1, "b", &[0]),
            row(2, "c", &[0]),
            row(3, "<d>", &[1, 2]),
        ];
        let status = HashMap::from([("a", "completed"), ("b", "failed")]);
        let svg = graph(&nodes, &status);
        assert_eq!(svg.matches("<g class=\"node\"").count(), 4);
        assert_eq!(svg.matches("class=\"edge\"").count(), 4);
        assert!(svg.contains(r#"data-node="a" data-kind="operation" data-status="completed""#));
        assert!(svg.contains(r#"data-node="b" data-kind="operation" data-status="failed""#));
        assert!(
            svg.contains(r#"data-node="&lt;d&gt;" data-kind="operation" data-status="pending""#)
        );
        // Three columns: a, then b and c, then d.
        assert!(svg.contains(r#"width="634""#), "{svg}");
    }

    #[test]
    fn the_axis_says_its_length_in_a_readable_unit() {
        assert_eq!(span_text(1_500), "1.5 ms");
        assert_eq!(span_text(12_000_000), "12.0 s");
        assert_eq!(span_text(3_600_000_000), "60.0 min");
    }

    #[test]
    fn a_stored_cycle_is_drawn_without_looping() {
        let nodes = [row(0, "a", &[1]), row(1, "b", &[0])];
        let svg = graph(&nodes, &HashMap::new());
        assert_eq!(svg.matches("<g class=\"node\"").count(), 2);
    }
}
