//! A reference model of withdrawal by `Cancel` and `Terminate` steps, and a property test that
//! compares the real scheduler with it on random workflows, below the macro.
//!
//! Which nodes a `Cancel` withdraws depends on when it runs, so this model keeps time, unlike
//! `model.rs`: every operation sleeps for its own power of two milliseconds on tokio's paused
//! clock, and every `Cancel` or `Terminate` comes right after an operation of its own. Then no
//! two operations end at the same instant (each end time is a sum of distinct powers of two
//! that holds the operation's own), so the order of events is a function of the workflow, and
//! the model replays it with a queue of end times. The model and the scheduler must agree on
//! every status, on when every operation started, and on whether the run failed.
//!
//! `FLOW_MODEL_CASES` sets the number of random workflows (1,000 by default).

use std::cell::RefCell;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::Duration;

use flowdag_runtime::__private::{
    Control, Instant, Leaf, Nodes, Plan, RunSetup, RunState, execute_nodes,
};
use flowdag_runtime::NodeStatus::{
    Aborted, Completed, Failed, Idle, Ready, Running, Skipped, Waiting, Withdrawn,
};
use flowdag_runtime::{
    Edge, EdgeKind, FailurePolicy, Graph, NodeError, NodeInfo, NodeKind, NodeStatus,
};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestCaseError;

// ---------------------------------------------------------------------------------------------
// Workflows as structure, and as a DAG
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone)]
enum Step {
    Op {
        fails: bool,
    },
    Seq(Vec<Step>),
    Par(Vec<Step>),
    Cond {
        test: bool,
        then: Vec<Step>,
        otherwise: Option<Vec<Step>>,
    },
    /// `'rN: step`: a region a `Cancel` may target.
    Labelled(Box<Step>),
    /// An operation, then `Cancel(target)`: `target` picks a region or a plain operation.
    Cancel {
        fails: bool,
        target: u16,
    },
    /// An operation, then `Terminate(..)`.
    Terminate {
        fails: bool,
    },
}

const SEQUENCE: u8 = 1;
const THEN: u8 = 8;
const ELSE: u8 = 16;

#[derive(Debug, Clone)]
struct Node {
    kind: NodeKind,
    fails: bool,
    /// An operation's duration in milliseconds: a power of two of its own.
    millis: u64,
    test: bool,
    then_nodes: Vec<usize>,
    else_nodes: Vec<usize>,
}

#[derive(Debug, Clone, Default)]
struct Wf {
    nodes: Vec<Node>,
    edges: BTreeMap<(usize, usize), u8>,
    /// The nodes of each labelled step.
    regions: Vec<Vec<usize>>,
    /// Operations written as `Step::Op` (a `Cancel` may name one).
    plain_ops: Vec<usize>,
    /// Each `Cancel` node and its pick.
    picks: Vec<(usize, u16)>,
    /// Each `Cancel` node's scope (resolved from its pick), by node.
    scope_of: BTreeMap<usize, Vec<usize>>,
    ops: u32,
}

impl Wf {
    fn succs(&self, node: usize) -> impl Iterator<Item = usize> + '_ {
        self.edges
            .range((node, 0)..(node + 1, 0))
            .map(|(&(_, to), _)| to)
    }

    fn push(&mut self, kind: NodeKind, fails: bool, test: bool) -> usize {
        let millis = if kind == NodeKind::Operation {
            self.ops += 1;
            1 << (self.ops - 1)
        } else {
            0
        };
        self.nodes.push(Node {
            kind,
            fails,
            millis,
            test,
            then_nodes: Vec::new(),
            else_nodes: Vec::new(),
        });
        self.nodes.len() - 1
    }

    fn sequence(&mut self, steps: &[Step]) -> (Vec<usize>, Vec<usize>) {
        let mut entries: Vec<usize> = Vec::new();
        let mut exits: Vec<usize> = Vec::new();
        for step in steps {
            let (e, x) = self.step(step);
            for &from in &exits {
                for &to in &e {
                    *self.edges.entry((from, to)).or_default() |= SEQUENCE;
                }
            }
            if entries.is_empty() {
                entries = e;
            }
            exits = x;
        }
        (entries, exits)
    }

    /// An operation, then an instant node after it.
    fn after_op(&mut self, kind: NodeKind, fails: bool) -> (Vec<usize>, Vec<usize>, usize) {
        let op = self.push(NodeKind::Operation, fails, false);
        let instant = self.push(kind, false, false);
        *self.edges.entry((op, instant)).or_default() |= SEQUENCE;
        (vec![op], vec![instant], instant)
    }

    fn step(&mut self, step: &Step) -> (Vec<usize>, Vec<usize>) {
        match step {
            Step::Op { fails } => {
                let id = self.push(NodeKind::Operation, *fails, false);
                self.plain_ops.push(id);
                (vec![id], vec![id])
            }
            Step::Seq(steps) => self.sequence(steps),
            Step::Par(steps) => {
                let (mut entries, mut exits) = (Vec::new(), Vec::new());
                for step in steps {
                    let (e, x) = self.step(step);
                    entries.extend(e);
                    exits.extend(x);
                }
                (entries, exits)
            }
            Step::Cond {
                test,
                then,
                otherwise,
            } => {
                let decision = self.push(NodeKind::Decision, false, *test);
                let mut exits = Vec::new();
                for (side, steps) in [(true, Some(then)), (false, otherwise.as_ref())] {
                    let Some(steps) = steps else {
                        exits.push(decision);
                        continue;
                    };
                    let first = self.nodes.len();
                    let (e, x) = self.sequence(steps);
                    let members: Vec<usize> = (first..self.nodes.len()).collect();
                    for to in e {
                        *self.edges.entry((decision, to)).or_default() |=
                            if side { THEN } else { ELSE };
                    }
                    exits.extend(x);
                    if side {
                        self.nodes[decision].then_nodes = members;
                    } else {
                        self.nodes[decision].else_nodes = members;
                    }
                }
                (vec![decision], exits)
            }
            Step::Labelled(inner) => {
                let first = self.nodes.len();
                let ends = self.step(inner);
                self.regions.push((first..self.nodes.len()).collect());
                ends
            }
            Step::Cancel { fails, target } => {
                let (e, x, cancel) = self.after_op(NodeKind::Cancel, *fails);
                self.picks.push((cancel, *target));
                (e, x)
            }
            Step::Terminate { fails } => {
                let (e, x, _) = self.after_op(NodeKind::Terminate, *fails);
                (e, x)
            }
        }
    }

    fn compile(body: &[Step]) -> Wf {
        let mut wf = Wf::default();
        wf.sequence(body);
        // A pick names a region when there are any, or else a plain operation, or nothing.
        for &(cancel, pick) in &wf.picks.clone() {
            let targets = wf.regions.len() + wf.plain_ops.len();
            let scope = match pick as usize % targets.max(1) {
                _ if targets == 0 => Vec::new(),
                i if i < wf.regions.len() => wf.regions[i].clone(),
                i => vec![wf.plain_ops[i - wf.regions.len()]],
            };
            wf.scope_of.insert(cancel, scope);
        }
        wf
    }

    fn len(&self) -> usize {
        self.nodes.len()
    }
}

fn leak<T>(items: Vec<T>) -> &'static [T] {
    Box::leak(items.into_boxed_slice())
}

/// The graph of `wf`, routing ordering edges through joins when `joins` is set (as the macro
/// does for a `Sequential` of `Parallel`s).
fn graph(wf: &Wf, joins: bool) -> &'static Graph {
    let n = wf.len();
    let nodes = (0..n)
        .map(|i| {
            let name: &'static str = Box::leak(format!("n{i}").into_boxed_str());
            NodeInfo::__new(name, wf.nodes[i].kind, name, i as u32 + 1, 1)
        })
        .collect();
    let edges = wf
        .edges
        .iter()
        .map(|(&(from, to), &why)| {
            let kind = match why {
                w if w & THEN != 0 => EdgeKind::Then,
                w if w & ELSE != 0 => EdgeKind::Else,
                _ => EdgeKind::Sequence,
            };
            Edge::__new(from as u32, to as u32, kind)
        })
        .collect();
    let mut preds: Vec<Vec<u32>> = vec![Vec::new(); n];
    for (&(from, to), &why) in &wf.edges {
        if joins && why == SEQUENCE {
            preds[to].push(from as u32);
        }
    }
    let mut groups: BTreeMap<Vec<u32>, Vec<u32>> = BTreeMap::new();
    for (to, preds) in preds.into_iter().enumerate() {
        if preds.len() > 1 {
            groups.entry(preds).or_default().push(to as u32);
        }
    }
    let mut join_of = vec![false; n];
    let mut feeds: Vec<Vec<u32>> = vec![Vec::new(); n];
    let (mut join_pred_count, mut join_succ_start, mut join_succ) = (vec![], vec![], vec![]);
    for (join, (sources, targets)) in groups.iter().enumerate() {
        for &from in sources {
            feeds[from as usize].push(join as u32 | Plan::JOIN);
        }
        for &to in targets {
            join_of[to as usize] = true;
        }
        join_pred_count.push(sources.len() as u32);
        join_succ_start.push(join_succ.len() as u32);
        join_succ.extend(targets);
    }
    join_succ_start.push(join_succ.len() as u32);
    let mut pred_count = vec![0u32; n];
    let (mut succ_start, mut succ) = (Vec::new(), Vec::new());
    for (from, feeds) in feeds.iter().enumerate() {
        succ_start.push(succ.len() as u32);
        succ.extend(feeds);
        for (&(_, to), &why) in wf.edges.range((from, 0)..(from + 1, 0)) {
            if join_of[to] && why == SEQUENCE {
                continue;
            }
            pred_count[to] += 1;
            succ.push(to as u32);
        }
    }
    succ_start.push(succ.len() as u32);
    for (to, &joined) in join_of.iter().enumerate() {
        pred_count[to] += u32::from(joined);
    }
    let roots = (0..n as u32)
        .filter(|&i| pred_count[i as usize] == 0)
        .collect();
    let lists = |select: fn(&Node) -> &Vec<usize>| -> &'static [&'static [u32]] {
        leak(
            wf.nodes
                .iter()
                .map(|node| leak(select(node).iter().map(|&m| m as u32).collect()))
                .collect(),
        )
    };
    let mut scopes = Vec::new();
    let instants = (0..n)
        .map(|i| match wf.nodes[i].kind {
            NodeKind::Cancel => {
                let scope = wf.scope_of[&i].iter().map(|&m| m as u32).collect();
                scopes.push(leak(scope));
                Instant::Cancel {
                    scope: scopes.len() as u32 - 1,
                }
            }
            NodeKind::Terminate => Instant::Terminate,
            _ => Instant::None,
        })
        .collect();
    let control = Box::leak(Box::new(Control::new(
        leak(scopes),
        &[],
        &[],
        &[],
        leak(instants),
        &[],
        &[],
        &[],
    )));
    let plan = Plan::new(
        leak(pred_count),
        leak(succ_start),
        leak(succ),
        leak(roots),
        leak(join_pred_count),
        leak(join_succ_start),
        leak(join_succ),
        lists(|node| &node.then_nodes),
        lists(|node| &node.else_nodes),
        &[],
        &[],
        &[],
        FailurePolicy::ContinueIndependent,
    )
    .with_control(control);
    Box::leak(Box::new(Graph::__new(
        "Withdraw",
        leak(nodes),
        leak(edges),
        plan,
    )))
}

// ---------------------------------------------------------------------------------------------
// The reference model
// ---------------------------------------------------------------------------------------------

#[derive(Debug)]
struct Expected {
    status: Vec<NodeStatus>,
    /// When each operation started, in milliseconds.
    started: Vec<Option<u64>>,
    run_fails: bool,
    /// Two instant nodes were ready at the same moment and one of them withdraws: their order
    /// is the scheduler's, which the model does not restate. Such a case is not compared.
    ambiguous: bool,
}

struct Sim<'a> {
    wf: &'a Wf,
    status: Vec<NodeStatus>,
    remaining: Vec<usize>,
    poisoned: Vec<bool>,
    started: Vec<Option<u64>>,
    ready: VecDeque<usize>,
}

impl Sim<'_> {
    fn terminal(&self, node: usize) -> bool {
        !matches!(self.status[node], Idle | Waiting | Ready | Running)
    }

    /// `node` ends `how`; its successors learn of it, and a skipped or withdrawn decision
    /// closes both its branches the same way.
    fn settle(&mut self, node: usize, how: NodeStatus) {
        self.status[node] = how;
        self.passed_on(node, how);
    }

    /// Tells what comes after `node` that it ended `how`.
    fn passed_on(&mut self, node: usize, how: NodeStatus) {
        if matches!(how, Skipped | Withdrawn) && self.wf.nodes[node].kind == NodeKind::Decision {
            let wf = self.wf;
            for &m in wf.nodes[node]
                .then_nodes
                .iter()
                .chain(&wf.nodes[node].else_nodes)
            {
                if !self.terminal(m) {
                    // Passed on now, so not again when its predecessors settle.
                    self.remaining[m] = 0;
                    self.settle(m, how);
                }
            }
        }
        let succs: Vec<usize> = self.wf.succs(node).collect();
        for succ in succs {
            if self.terminal(succ) {
                // Withdrawn before its predecessors settled: it passes that on after them.
                if self.status[succ] == Withdrawn && self.remaining[succ] > 0 {
                    self.remaining[succ] -= 1;
                    if self.remaining[succ] == 0 {
                        self.passed_on(succ, Withdrawn);
                    }
                }
                continue;
            }
            self.remaining[succ] -= 1;
            self.poisoned[succ] |= matches!(how, Failed | Aborted);
            if self.remaining[succ] > 0 {
                self.status[succ] = Waiting;
            } else if self.poisoned[succ] {
                self.settle(succ, Aborted);
            } else {
                self.status[succ] = Ready;
                self.ready.push_back(succ);
            }
        }
    }

    /// Withdraws every node of `nodes` that has not ended: all of them first, then what
    /// comes after those whose predecessors have all settled learns of it (the others pass
    /// it on when their last predecessor settles).
    fn withdraw(&mut self, nodes: impl IntoIterator<Item = usize>) {
        let cut: Vec<usize> = nodes.into_iter().filter(|&m| !self.terminal(m)).collect();
        for &node in &cut {
            self.status[node] = Withdrawn;
        }
        let settled: Vec<usize> = cut
            .into_iter()
            .filter(|&m| self.remaining[m] == 0)
            .collect();
        for node in settled {
            self.passed_on(node, Withdrawn);
        }
    }
}

/// Replays a run of `wf` in time order.
fn model(wf: &Wf) -> Expected {
    let n = wf.len();
    let mut remaining = vec![0; n];
    for &(_, to) in wf.edges.keys() {
        remaining[to] += 1;
    }
    let mut sim = Sim {
        wf,
        status: vec![Idle; n],
        remaining,
        poisoned: vec![false; n],
        started: vec![None; n],
        ready: (0..n)
            .filter(|&i| wf.edges.keys().all(|&(_, to)| to != i))
            .collect(),
    };
    for &root in &sim.ready {
        sim.status[root] = Ready;
    }
    let mut ends: BinaryHeap<Reverse<(u64, usize)>> = BinaryHeap::new();
    let (mut now, mut terminated, mut ambiguous) = (0, false, false);
    loop {
        while let Some(node) = sim.ready.pop_front() {
            if sim.terminal(node) {
                continue;
            }
            let kind = wf.nodes[node].kind;
            if matches!(kind, NodeKind::Cancel | NodeKind::Terminate)
                && sim.ready.iter().any(|&other| {
                    !sim.terminal(other) && wf.nodes[other].kind != NodeKind::Operation
                })
            {
                ambiguous = true;
            }
            match kind {
                NodeKind::Operation => {
                    sim.status[node] = Running;
                    sim.started[node] = Some(now);
                    ends.push(Reverse((now + wf.nodes[node].millis, node)));
                }
                NodeKind::Decision => {
                    let d = &wf.nodes[node];
                    let untaken = if d.test { &d.else_nodes } else { &d.then_nodes };
                    for &m in untaken {
                        if !sim.terminal(m) {
                            sim.settle(m, Skipped);
                        }
                    }
                    sim.settle(node, Completed);
                }
                NodeKind::Cancel => {
                    sim.settle(node, Completed);
                    sim.withdraw(wf.scope_of[&node].clone());
                }
                NodeKind::Terminate => {
                    sim.settle(node, Completed);
                    terminated = true;
                    sim.withdraw(0..n);
                }
                other => unreachable!("the model builds no {other:?} node"),
            }
        }
        let Some(Reverse((at, node))) = ends.pop() else {
            break;
        };
        if sim.status[node] != Running {
            continue;
        }
        now = at;
        let how = if wf.nodes[node].fails {
            Failed
        } else {
            Completed
        };
        sim.settle(node, how);
    }
    let run_fails = !terminated && sim.status.iter().any(|s| matches!(s, Failed | Aborted));
    Expected {
        status: sim.status,
        started: sim.started,
        run_fails,
        ambiguous,
    }
}

// ---------------------------------------------------------------------------------------------
// The node set the scheduler drives
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Default)]
struct Log {
    started: Vec<Option<u64>>,
    ended: Vec<bool>,
    misuse: Vec<String>,
}

type NodeFuture = Pin<Box<dyn Future<Output = Result<(), NodeError>>>>;

struct Harness {
    nodes: Vec<HarnessNode>,
}

// SAFETY: collects its own nodes, each once.
unsafe impl Nodes for Harness {
    const LEN: usize = usize::MAX;

    unsafe fn collect<'a>(
        self: Pin<&'a mut Self>,
        _arena: *mut u8,
        out: &mut Vec<Pin<&'a mut (dyn Leaf + 'a)>>,
    ) where
        Self: 'a,
    {
        for node in &mut self.get_mut().nodes {
            let node: Pin<&mut HarnessNode> = Pin::new(node);
            out.push(node);
        }
    }
}

struct HarnessNode {
    node: Node,
    i: usize,
    t0: tokio::time::Instant,
    log: Rc<RefCell<Log>>,
    running: Option<NodeFuture>,
}

impl Leaf for HarnessNode {
    fn start(self: Pin<&mut Self>) {
        let this = self.get_mut();
        let i = this.i;
        let mut log = this.log.borrow_mut();
        if this.node.kind != NodeKind::Operation || log.started[i].is_some() {
            log.misuse
                .push(format!("start({i}) twice or on an instant node"));
        }
        log.started[i] = Some(this.t0.elapsed().as_millis() as u64);
        let (millis, fails) = (this.node.millis, this.node.fails);
        let shared = Rc::clone(&this.log);
        this.running = Some(Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(millis)).await;
            shared.borrow_mut().ended[i] = true;
            match fails {
                false => Ok(()),
                true => Err(NodeError::Failed(Box::new(std::io::Error::other("failed")))),
            }
        }));
    }

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), NodeError>> {
        let this = self.get_mut();
        match &mut this.running {
            Some(future) => {
                let polled = future.as_mut().poll(cx);
                if polled.is_ready() {
                    this.running = None;
                }
                polled
            }
            None => {
                let message = format!("poll({}) on a node that is not running", this.i);
                this.log.borrow_mut().misuse.push(message);
                Poll::Ready(Err(NodeError::Internal("not running")))
            }
        }
    }

    fn stop(self: Pin<&mut Self>) {
        self.get_mut().running = None;
    }

    fn decide(self: Pin<&mut Self>, _: &RunState) -> bool {
        match self.node.kind {
            NodeKind::Decision => self.node.test,
            _ => true,
        }
    }
}

#[derive(Debug)]
struct Observed {
    status: Vec<NodeStatus>,
    run_fails: bool,
    log: Log,
}

fn run(wf: &Wf, graph: &'static Graph) -> Result<Observed, String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .map_err(|e| format!("no tokio runtime: {e}"))?;
    let log = Rc::new(RefCell::new(Log {
        started: vec![None; wf.len()],
        ended: vec![false; wf.len()],
        misuse: Vec::new(),
    }));
    let finished = runtime.block_on(async {
        let t0 = tokio::time::Instant::now();
        let harness = Harness {
            nodes: (0..wf.len())
                .map(|i| HarnessNode {
                    node: wf.nodes[i].clone(),
                    i,
                    t0,
                    log: Rc::clone(&log),
                    running: None,
                })
                .collect(),
        };
        // The default options record the log and build the report.
        let options = RunSetup::default();
        tokio::time::timeout(
            Duration::from_secs(365 * 24 * 3600),
            execute_nodes(graph, options, harness),
        )
        .await
    });
    let outcome = finished
        .map_err(|_| "the run never finished".to_string())?
        .output(|| Ok(()));
    let live: Vec<NodeStatus> = outcome.report.nodes().iter().map(|n| n.status).collect();
    let replayed = outcome.report.log().statuses();
    if replayed != live {
        return Err(format!(
            "the log replays to {replayed:?}, the run ended with {live:?}"
        ));
    }
    let log = std::mem::take(&mut *log.borrow_mut());
    Ok(Observed {
        status: live,
        run_fails: outcome.result.is_err(),
        log,
    })
}

fn check(body: &[Step], joins: bool) -> Result<bool, String> {
    let wf = Wf::compile(body);
    let expected = model(&wf);
    if expected.ambiguous {
        return Ok(false);
    }
    let graph = graph(&wf, joins);
    let observed = run(&wf, graph)?;
    let describe = || {
        let nodes: Vec<String> = (0..wf.len())
            .map(|i| {
                let node = &wf.nodes[i];
                let succs: Vec<usize> = wf.succs(i).collect();
                format!(
                    "n{i} {:?} {}ms fails={} test={} scope={:?} -> {succs:?}",
                    node.kind,
                    node.millis,
                    node.fails,
                    node.test,
                    wf.scope_of.get(&i),
                )
            })
            .collect();
        format!(
            "{}\nexpected {:?} started {:?} fails={}\nobserved {:?} started {:?} fails={}",
            nodes.join("\n"),
            expected.status,
            expected.started,
            expected.run_fails,
            observed.status,
            observed.log.started,
            observed.run_fails,
        )
    };
    if !observed.log.misuse.is_empty() {
        return Err(format!("{:?}\n{}", observed.log.misuse, describe()));
    }
    if observed.status != expected.status
        || observed.log.started != expected.started
        || observed.run_fails != expected.run_fails
    {
        return Err(describe());
    }
    for (i, &status) in observed.status.iter().enumerate() {
        if status == Withdrawn && observed.log.ended[i] {
            return Err(format!(
                "n{i} ended by itself and was withdrawn\n{}",
                describe()
            ));
        }
    }
    Ok(true)
}

// ---------------------------------------------------------------------------------------------
// Random workflows
// ---------------------------------------------------------------------------------------------

fn fails() -> impl Strategy<Value = bool> {
    prop::bool::weighted(0.15)
}

fn leaf() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => fails().prop_map(|fails| Step::Op { fails }),
        3 => (fails(), any::<u16>()).prop_map(|(fails, target)| Step::Cancel { fails, target }),
        1 => fails().prop_map(|fails| Step::Terminate { fails }),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    leaf().prop_recursive(4, 24, 3, |inner| {
        let block = prop::collection::vec(inner.clone(), 1..=3);
        prop_oneof![
            1 => block.clone().prop_map(Step::Seq),
            1 => block.clone().prop_map(Step::Par),
            1 => (any::<bool>(), block.clone(), prop::option::of(block)).prop_map(
                |(test, then, otherwise)| Step::Cond {
                    test,
                    then,
                    otherwise,
                }
            ),
            2 => inner.prop_map(|step| Step::Labelled(Box::new(step))),
        ]
    })
}

fn cases() -> u32 {
    match std::env::var("FLOW_MODEL_CASES") {
        Ok(value) => value.trim().parse().unwrap_or_else(|_| {
            panic!("FLOW_MODEL_CASES must be a number of cases, not {value:?}")
        }),
        Err(_) => 1000,
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// The scheduler withdraws what the model withdraws, starts every operation when the
    /// model does, and fails a run exactly when the model does.
    #[test]
    fn withdrawals_agree_with_the_model(body in prop::collection::vec(step(), 1..=4), joins: bool) {
        let ops = Wf::compile(&body).ops;
        prop_assume!(ops <= 30);
        check(&body, joins).map_err(TestCaseError::fail)?;
    }
}

/// Hand-built cases: a region cancelled while it runs, a `Cancel` inside its own region, and
/// a `Terminate` beside a running branch; each is compared, none is ambiguous.
#[test]
fn hand_built_withdrawals_agree_with_the_model() {
    let op = |fails| Step::Op { fails };
    let cases = [
        vec![Step::Par(vec![
            Step::Cancel {
                fails: false,
                target: 0,
            },
            Step::Labelled(Box::new(Step::Seq(vec![op(false), op(false), op(false)]))),
        ])],
        vec![
            Step::Labelled(Box::new(Step::Seq(vec![
                op(false),
                Step::Cancel {
                    fails: false,
                    target: 0,
                },
                op(false),
            ]))),
            op(false),
        ],
        vec![Step::Par(vec![
            Step::Terminate { fails: false },
            Step::Seq(vec![op(false), op(true), op(false)]),
        ])],
    ];
    let mut withdrawn = 0;
    for body in &cases {
        for joins in [false, true] {
            assert_eq!(check(body, joins), Ok(true));
        }
        withdrawn += model(&Wf::compile(body))
            .status
            .iter()
            .filter(|&&s| s == Withdrawn)
            .count();
    }
    assert!(withdrawn >= 5, "the cases withdraw nodes: {withdrawn}");
}

/// Most random workflows are compared (few are ambiguous), and many withdraw something.
#[test]
fn random_workflows_exercise_withdrawal() {
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strategy = prop::collection::vec(step(), 1..=4);
    let (mut compared, mut withdrawing) = (0, 0);
    for _ in 0..200 {
        let body = strategy
            .new_tree(&mut runner)
            .map(|tree| tree.current())
            .unwrap_or_default();
        let wf = Wf::compile(&body);
        let expected = model(&wf);
        if !expected.ambiguous {
            compared += 1;
            withdrawing += usize::from(expected.status.contains(&Withdrawn));
        }
    }
    assert!(compared >= 150, "{compared} of 200 compared");
    assert!(withdrawing >= 40, "{withdrawing} of 200 withdraw a node");
}
