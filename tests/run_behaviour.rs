//! What a run does, checked against an event log on tokio's paused clock: ordering, overlap,
//! branches, data passing, failure propagation, error boundaries, skips, panics, timeouts,
//! concurrency limits, cancellation and the static graph.

mod common;

use std::num::NonZeroUsize;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Waker};

use flowdag::prelude::*;
use flowdag::{EdgeKind, Graph, NodeKind};
use tokio::time::sleep;

use common::{Boom, Log, fail, ms, work, work_on};

/// Asserts, for every edge of `graph` between two operations, that the target's `start` comes
/// after the source's `end` in the log (by position and by time). Decisions log nothing, so an
/// edge through a decision is checked from the decision's own predecessors.
fn assert_edges_respected(graph: &Graph, log: &Log) {
    for edge in graph.edges() {
        let from = &graph.nodes()[edge.from as usize];
        let to = &graph.nodes()[edge.to as usize];
        assert_eq!(
            from.kind,
            NodeKind::Operation,
            "edge from a decision in {graph}"
        );
        assert_eq!(
            to.kind,
            NodeKind::Operation,
            "edge into a decision in {graph}"
        );
        assert!(
            log.index(from.name, "end") < log.index(to.name, "start"),
            "`{}` started before its predecessor `{}` ended: {:?}",
            to.name,
            from.name,
            log.events()
        );
        assert!(log.at(from.name, "end") <= log.at(to.name, "start"));
    }
}

/// Every node's `(name, status)`, in node order. Also checks that the run's event log replays
/// to the same statuses (the statuses are a projection of the log).
fn statuses(report: &Report) -> Vec<(&'static str, NodeStatus)> {
    let live: Vec<NodeStatus> = report.nodes().iter().map(|n| n.status).collect();
    assert_eq!(
        report.log().statuses(),
        live,
        "the log replays to the live statuses"
    );
    report.nodes().iter().map(|n| (n.name, n.status)).collect()
}

/// `(name, status)` pairs sorted by name, to compare without depending on node order.
fn sorted(mut pairs: Vec<(&'static str, NodeStatus)>) -> Vec<(&'static str, NodeStatus)> {
    pairs.sort_unstable_by_key(|(name, _)| *name);
    pairs
}

/// The edges of `graph` as sorted `(from, to, kind)` name triples.
fn edge_names(graph: &Graph) -> Vec<(&'static str, &'static str, EdgeKind)> {
    let mut edges: Vec<_> = graph
        .edges()
        .iter()
        .map(|e| {
            (
                graph.nodes()[e.from as usize].name,
                graph.nodes()[e.to as usize].name,
                e.kind,
            )
        })
        .collect();
    edges.sort_unstable_by_key(|&(from, to, _)| (from, to));
    edges
}

/// Logs `start`, sleeps, logs `end`, returns `x + y + millis`.
async fn join2(log: &Log, name: &'static str, x: &u64, y: &u64, millis: u64) -> Result<u64, Boom> {
    log.record(name, "start");
    sleep(ms(millis)).await;
    log.record(name, "end");
    Ok(x + y + millis)
}

// ---------------------------------------------------------------------------------------------
// 1. A node never starts before all its predecessors have ended.

workflow! {
    /// a -> (b, c) -> d, with b slower than c so that d must wait for the slower one.
    Diamond(log: &Log) -> u64 {
        Sequential {
            a = Operation(work(log, "a", 10)),
            Parallel {
                b = Operation(work_on(log, "b", &a, 30)),
                c = Operation(work_on(log, "c", &a, 20)),
            },
            d = Operation(join2(log, "d", &b, &c, 10)),
        }
        => d
    }
}

workflow! {
    /// Three layers of three nodes and a last node; each layer waits for all of the one before.
    Layered(log: &Log) {
        Sequential {
            Parallel {
                a1 = Operation(work(log, "a1", 30)),
                a2 = Operation(work(log, "a2", 10)),
                a3 = Operation(work(log, "a3", 20)),
            },
            Parallel {
                b1 = Operation(work_on(log, "b1", &a2, 5)),
                b2 = Operation(work(log, "b2", 25)),
                b3 = Operation(work_on(log, "b3", &a3, 15)),
            },
            Parallel {
                c1 = Operation(work(log, "c1", 7)),
                c2 = Operation(work_on(log, "c2", &b3, 3)),
                c3 = Operation(join2(log, "c3", &b1, &a1, 1)),
            },
            last = Operation(work(log, "last", 1)),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn diamond_node_starts_only_after_every_predecessor_ended() {
    assert_eq!(
        edge_names(&Diamond::GRAPH),
        vec![
            ("a", "b", EdgeKind::Data),
            ("a", "c", EdgeKind::Data),
            ("b", "d", EdgeKind::Data),
            ("c", "d", EdgeKind::Data),
        ]
    );
    let log = Log::new();
    let d = Diamond::run(&log).await.expect("the diamond succeeds");
    // b = 10 + 30, c = 10 + 20, d = b + c + 10.
    assert_eq!(d, 80);
    assert_edges_respected(&Diamond::GRAPH, &log);
    assert_eq!(log.at("a", "start"), ms(0));
    assert_eq!(log.at("b", "start"), ms(10));
    assert_eq!(log.at("c", "start"), ms(10));
    assert_eq!(log.at("c", "end"), ms(30));
    assert_eq!(log.at("b", "end"), ms(40));
    // d waits for the slower of its two predecessors, and not a tick longer.
    assert_eq!(log.at("d", "start"), ms(40));
    assert_eq!(log.at("d", "end"), ms(50));
    assert_eq!(log.elapsed(), ms(50));
}

#[tokio::test(start_paused = true)]
async fn layered_node_starts_only_after_every_predecessor_ended() {
    // Every node of a layer depends on every node of the layer before (3x3 + 3x3 + 3x1), and
    // `c3` reads `a1`, two layers up.
    assert_eq!(Layered::GRAPH.edges().len(), 22);
    let layers = [["a1", "a2", "a3"], ["b1", "b2", "b3"], ["c1", "c2", "c3"]];
    for pair in layers.windows(2) {
        for from in pair[0] {
            for to in pair[1] {
                assert!(
                    edge_names(&Layered::GRAPH)
                        .iter()
                        .any(|&(f, t, _)| f == from && t == to),
                    "missing edge {from} -> {to} in {}",
                    Layered::GRAPH
                );
            }
        }
    }
    let c3_reads = edge_names(&Layered::GRAPH)
        .into_iter()
        .filter(|&(_, to, kind)| to == "c3" && kind == EdgeKind::Data)
        .map(|(from, _, _)| from)
        .collect::<Vec<_>>();
    // `a1` is two layers up: a data edge of its own.
    assert_eq!(c3_reads, vec!["a1", "b1"]);

    let log = Log::new();
    Layered::run(&log)
        .await
        .expect("the layered graph succeeds");
    assert_edges_respected(&Layered::GRAPH, &log);
    for name in ["a1", "a2", "a3"] {
        assert_eq!(log.at(name, "start"), ms(0), "{name}");
    }
    // Layer b waits for the slowest of layer a (30ms), layer c for the slowest of b (30 + 25).
    for name in ["b1", "b2", "b3"] {
        assert_eq!(log.at(name, "start"), ms(30), "{name}");
    }
    for name in ["c1", "c2", "c3"] {
        assert_eq!(log.at(name, "start"), ms(55), "{name}");
    }
    assert_eq!(log.at("last", "start"), ms(62));
    assert_eq!(log.elapsed(), ms(63));
    assert_eq!(log.started().len(), 10);
    assert_eq!(log.ended().len(), 10);
}

// ---------------------------------------------------------------------------------------------
// 2. Independent nodes overlap.

workflow! {
    /// Two 100ms sleeps side by side.
    TwoParallel(log: &Log) {
        Parallel {
            a = Operation(work(log, "a", 100)),
            b = Operation(work(log, "b", 100)),
        }
    }
}

workflow! {
    /// Two 100ms sleeps one after the other.
    TwoSequential(log: &Log) {
        Sequential {
            a = Operation(work(log, "a", 100)),
            b = Operation(work(log, "b", 100)),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn parallel_sleeps_overlap_and_sequential_sleeps_add_up() {
    let log = Log::new();
    TwoParallel::run(&log).await.expect("parallel run succeeds");
    assert_eq!(log.at("a", "start"), ms(0));
    assert_eq!(log.at("b", "start"), ms(0));
    assert_eq!(log.at("a", "end"), ms(100));
    assert_eq!(log.at("b", "end"), ms(100));
    assert_eq!(log.elapsed(), ms(100));

    let log = Log::new();
    TwoSequential::run(&log)
        .await
        .expect("sequential run succeeds");
    assert_eq!(log.at("a", "start"), ms(0));
    assert_eq!(log.at("a", "end"), ms(100));
    assert_eq!(log.at("b", "start"), ms(100));
    assert_eq!(log.at("b", "end"), ms(200));
    assert_eq!(log.elapsed(), ms(200));
}

// ---------------------------------------------------------------------------------------------
// 3. DESIGN's `Pattern`.

workflow! {
    /// Step 4 needs 1 and 2 only; the long steps 3 and 5 run on beside it.
    Pattern(log: &Log) {
        Parallel {
            Sequential {
                one = Operation(work(log, "one", 10)),
                three = Operation(work_on(log, "three", &one, 100)),
            },
            Sequential {
                two = Operation(work(log, "two", 30)),
                five = Operation(work_on(log, "five", &two, 60)),
            },
            four = Operation(work(log, "four", 5), after = [one, two]),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn pattern_step4_waits_for_steps_1_and_2_only() {
    assert_eq!(
        edge_names(&Pattern::GRAPH),
        vec![
            ("one", "four", EdgeKind::After),
            ("one", "three", EdgeKind::Data),
            ("two", "five", EdgeKind::Data),
            ("two", "four", EdgeKind::After),
        ]
    );
    let log = Log::new();
    Pattern::run(&log).await.expect("the pattern succeeds");
    assert_edges_respected(&Pattern::GRAPH, &log);

    // step4 starts when the later of step1 (10ms) and step2 (30ms) ends...
    assert_eq!(log.at("one", "end"), ms(10));
    assert_eq!(log.at("two", "end"), ms(30));
    assert_eq!(log.at("four", "start"), ms(30));
    assert!(log.index("one", "end") < log.index("four", "start"));
    assert!(log.index("two", "end") < log.index("four", "start"));
    // ...while step3 and step5 are still running, and ends before either of them.
    assert_eq!(log.at("three", "start"), ms(10));
    assert_eq!(log.at("five", "start"), ms(30));
    assert_eq!(log.at("four", "end"), ms(35));
    assert_eq!(log.at("five", "end"), ms(90));
    assert_eq!(log.at("three", "end"), ms(110));
    assert!(log.index("four", "start") < log.index("three", "end"));
    assert!(log.index("four", "start") < log.index("five", "end"));
    assert!(log.index("four", "end") < log.index("five", "end"));
    assert_eq!(log.elapsed(), ms(110));
}

// ---------------------------------------------------------------------------------------------
// 4. Both branches of a Conditional.

workflow! {
    /// Branches on a parameter and on `a`'s value; `z` runs after either branch.
    Branch(log: &Log, flag: bool) -> (Option<u64>, Option<u64>, u64) {
        Sequential {
            a = Operation(work(log, "a", 10)),
            Conditional(flag && a.is_ok_and(|a| *a == 10)) {
                t1 = Operation(work(log, "t1", 5)),
                t2 = Operation(work_on(log, "t2", &t1, 7)),
            } else {
                e1 = Operation(work(log, "e1", 20)),
            },
            z = Operation(work(log, "z", 1)),
        }
        => (t2.copied(), e1.copied(), z)
    }
}

#[tokio::test(start_paused = true)]
async fn conditional_then_branch_runs_and_else_branch_is_skipped() {
    let log = Log::new();
    let outcome = Branch::runner().execute((&log, true)).await;
    let report = &outcome.report;
    assert_eq!(report.status("a"), Some(NodeStatus::Completed));
    assert_eq!(report.status("decision#1"), Some(NodeStatus::Completed));
    assert_eq!(report.status("t1"), Some(NodeStatus::Completed));
    assert_eq!(report.status("t2"), Some(NodeStatus::Completed));
    assert_eq!(report.status("e1"), Some(NodeStatus::Skipped));
    assert_eq!(report.status("z"), Some(NodeStatus::Completed));
    assert_eq!(report.status("nope"), None);
    assert_eq!(report.nodes().len(), 6);
    assert_eq!(report.count(NodeStatus::Completed), 5);
    assert_eq!(report.count(NodeStatus::Skipped), 1);
    assert!(report.nodes().iter().all(|n| n.error.is_none()));
    // t2 = t1 + 7 = 5 + 7; the skipped else branch gives `None`.
    assert_eq!(
        outcome.result.expect("then branch succeeds"),
        (Some(12), None, 1)
    );
    assert_eq!(log.started(), vec!["a", "t1", "t2", "z"]);
    assert_eq!(log.at("z", "start"), ms(22));
}

#[tokio::test(start_paused = true)]
async fn conditional_else_branch_runs_and_then_branch_is_skipped() {
    let log = Log::new();
    let outcome = Branch::runner().execute((&log, false)).await;
    assert_eq!(
        sorted(statuses(&outcome.report)),
        vec![
            ("a", NodeStatus::Completed),
            ("decision#1", NodeStatus::Completed),
            ("e1", NodeStatus::Completed),
            ("t1", NodeStatus::Skipped),
            ("t2", NodeStatus::Skipped),
            ("z", NodeStatus::Completed),
        ]
    );
    assert_eq!(
        outcome.result.expect("else branch succeeds"),
        (None, Some(20), 1)
    );
    // Skipped nodes never ran; z ran after the else branch.
    assert_eq!(log.started(), vec!["a", "e1", "z"]);
    assert_eq!(log.at("z", "start"), ms(30));
}

// ---------------------------------------------------------------------------------------------
// 5. Data passing by reference.

/// Deliberately neither `Clone` nor `Copy`: it can only be read through references.
#[derive(Debug, PartialEq, Eq)]
struct Order {
    id: u64,
    customer: String,
    items: Vec<String>,
}

/// Neither `Clone` nor `Copy`: a workflow parameter passed by reference.
#[derive(Debug)]
struct Shop {
    name: String,
}

async fn fetch_order(shop: &Shop, customer: &str, id: u64) -> Result<Order, Boom> {
    sleep(ms(1)).await;
    Ok(Order {
        id,
        customer: format!("{customer}@{}", shop.name),
        items: vec!["apple".to_string(), "pear".to_string()],
    })
}

/// The address of what it was given, to show that two steps read the same value.
async fn address_of(order: &Order) -> Result<usize, Boom> {
    sleep(ms(1)).await;
    Ok(std::ptr::from_ref(order) as usize)
}

async fn describe(order: &Order, shop: &Shop) -> Result<String, Boom> {
    Ok(format!(
        "{} x{} from {}",
        order.customer,
        order.items.len(),
        shop.name
    ))
}

async fn double(id: u64) -> Result<u64, Boom> {
    Ok(id * 2)
}

async fn list_items(order: &Order) -> Result<Vec<String>, Boom> {
    Ok(order.items.iter().map(|item| item.to_uppercase()).collect())
}

/// Takes its argument by value: only a clone can be passed to it.
async fn take_items(items: Vec<String>) -> Result<usize, Boom> {
    Ok(items.into_iter().map(|s| s.len()).sum())
}

async fn shop_address(shop: &Shop) -> Result<usize, Boom> {
    Ok(std::ptr::from_ref(shop) as usize)
}

/// What the output expression of `ByRef` saw.
#[derive(Debug)]
struct Seen {
    text: String,
    doubled: u64,
    letters: usize,
    upper: Vec<String>,
    first: usize,
    second: usize,
    order_at: usize,
    shop_at: usize,
    customer: String,
}

workflow! {
    /// Reads a non-Clone order by reference and by field, and passes clones where a step takes
    /// its argument by value.
    ByRef(shop: &Shop, customer: &str, id: u64) -> Seen {
        Sequential {
            order = Operation(fetch_order(shop, customer, id)),
            Parallel {
                first = Operation(address_of(&order)),
                second = Operation(address_of(&order)),
                text = Operation(describe(&order, shop)),
                doubled = Operation(double(order.id)),
                upper = Operation(list_items(&order)),
                shop_at = Operation(shop_address(shop)),
            },
            letters = Operation(take_items(upper.clone())),
        }
        => Seen {
            text: text.clone(),
            doubled,
            letters,
            upper: upper.clone(),
            first,
            second,
            order_at: std::ptr::from_ref(&order) as usize,
            shop_at,
            customer: order.customer.clone(),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn outputs_and_parameters_are_passed_by_reference() {
    let shop = Shop {
        name: "corner".to_string(),
    };
    let customer = String::from("ada");
    let seen = ByRef::run(&shop, &customer, 21)
        .await
        .expect("the run succeeds");
    assert_eq!(seen.text, "ada@corner x2 from corner");
    assert_eq!(seen.doubled, 42);
    assert_eq!(seen.letters, "APPLE".len() + "PEAR".len());
    // `upper.clone()` moved a copy into `take_items`; the stored output is intact.
    assert_eq!(seen.upper, vec!["APPLE", "PEAR"]);
    // Two steps reading `&order`, and the output expression, see the very same value:
    // nothing was copied or moved out of the run's storage.
    assert_eq!(seen.first, seen.second);
    assert_eq!(seen.first, seen.order_at);
    // A `&Shop` parameter reaches the operation as the caller's reference.
    assert_eq!(seen.shop_at, std::ptr::from_ref(&shop) as usize);
    assert_eq!(seen.customer, "ada@corner");
    // The data edges are exactly those the arguments name.
    let edges = edge_names(&ByRef::GRAPH);
    for reader in ["first", "second", "text", "doubled", "upper"] {
        assert!(
            edges.contains(&("order", reader, EdgeKind::Data)),
            "{reader}: {edges:?}"
        );
    }
    assert!(edges.contains(&("order", "shop_at", EdgeKind::Sequence)));
    assert!(edges.contains(&("upper", "letters", EdgeKind::Data)));
    assert!(edges.contains(&("text", "letters", EdgeKind::Sequence)));
}

// ---------------------------------------------------------------------------------------------
// 6. Partial failure.

workflow! {
    /// `x` fails; `y` reads it and `z` follows `y`; `i` and `j` are independent of both.
    Partial(log: &Log) {
        Parallel {
            Sequential {
                x = Operation(fail(log, "x", 10)),
                y = Operation(work_on(log, "y", &x, 10)),
                z = Operation(work(log, "z", 10)),
            },
            Sequential {
                i = Operation(work(log, "i", 50)),
                j = Operation(work_on(log, "j", &i, 5)),
            },
        }
    }
}

#[tokio::test(start_paused = true)]
async fn failure_aborts_dependents_and_independent_branch_completes() {
    let log = Log::new();
    let outcome = Partial::runner().execute(&log).await;
    let report = &outcome.report;
    assert_eq!(
        sorted(statuses(report)),
        vec![
            ("i", NodeStatus::Completed),
            ("j", NodeStatus::Completed),
            ("x", NodeStatus::Failed),
            ("y", NodeStatus::Aborted),
            ("z", NodeStatus::Aborted),
        ]
    );
    let error_text = |name: &str| {
        report
            .nodes()
            .iter()
            .find(|n| n.name == name)
            .and_then(|n| n.error.as_deref().map(str::to_owned))
    };
    assert_eq!(error_text("x").as_deref(), Some("boom: x"));
    assert_eq!(
        error_text("y").as_deref(),
        Some("aborted because `x` failed")
    );
    assert_eq!(
        error_text("z").as_deref(),
        Some("aborted because `x` failed")
    );
    assert_eq!(error_text("i"), None);

    // The aborted nodes never ran; the independent branch ran to its end after the failure.
    assert_eq!(log.started(), vec!["x", "i", "j"]);
    assert_eq!(log.at("j", "end"), ms(55));

    let err = outcome
        .result
        .expect_err("an uncaught failure fails the run");
    assert_eq!(err.workflow(), "Partial");
    assert_eq!(err.failures().len(), 3);
    let failed: Vec<_> = err.failed().map(|f| f.node).collect();
    assert_eq!(failed, vec!["x"]);
    let aborted: Vec<_> = err
        .aborted()
        .map(|f| match f.error {
            NodeError::Aborted { cause } => (f.node, cause),
            ref other => panic!("`{}` should be aborted, is {other:?}", f.node),
        })
        .collect();
    assert_eq!(aborted, vec![("y", "x"), ("z", "x")]);
    let x = err.error_of("x").expect("x is listed");
    assert!(matches!(x, NodeError::Failed(_)), "{x:?}");
    assert_eq!(x.downcast_ref::<Boom>(), Some(&Boom("x")));
    assert_eq!(x.to_string(), "boom: x");
    assert!(matches!(
        err.error_of("z"),
        Some(NodeError::Aborted { cause: "x" })
    ));
    assert!(err.error_of("i").is_none());
    assert!(err.error_of("j").is_none());
    assert!(!err.is_cancelled());
    assert_eq!(
        err.to_string(),
        "workflow `Partial` failed: 1 node failed (`x`), 2 nodes aborted (`y`, `z`)"
    );
}

// ---------------------------------------------------------------------------------------------
// 7. A Conditional as error boundary.

workflow! {
    /// `f` fails; the test looks at its error and takes the else branch.
    Boundary(log: &Log) -> (Option<u64>, u64) {
        Sequential {
            f = Operation(fail(log, "f", 10)),
            Conditional(!f.is_err_and(|e| e.downcast_ref::<Boom>() == Some(&Boom("f")))) {
                good = Operation(work(log, "good", 10)),
            } else {
                fallback = Operation(work(log, "fallback", 20)),
            },
            last = Operation(work(log, "last", 1)),
        }
        => (fallback.copied(), last)
    }
}

workflow! {
    /// `f` fails, which aborts `g`; the test names `g` and sees it aborted because of `f`.
    BoundaryAborted(log: &Log) -> (Option<u64>, u64) {
        Sequential {
            f = Operation(fail(log, "f", 10)),
            g = Operation(work_on(log, "g", &f, 10)),
            Conditional(!g.is_err_and(|e| matches!(e, NodeError::Aborted { cause: "f" }))) {
                good = Operation(work(log, "good", 10)),
            } else {
                fallback = Operation(work(log, "fallback", 20)),
            },
            last = Operation(work(log, "last", 1)),
        }
        => (fallback.copied(), last)
    }
}

#[tokio::test(start_paused = true)]
async fn conditional_catches_a_failed_node_it_names() {
    let log = Log::new();
    let outcome = Boundary::runner().execute(&log).await;
    assert_eq!(
        sorted(statuses(&outcome.report)),
        vec![
            ("decision#1", NodeStatus::Completed),
            ("f", NodeStatus::Failed),
            ("fallback", NodeStatus::Completed),
            ("good", NodeStatus::Skipped),
            ("last", NodeStatus::Completed),
        ]
    );
    let f = outcome.report.nodes().iter().find(|n| n.name == "f");
    assert_eq!(f.and_then(|n| n.error.as_deref()), Some("boom: f"));
    assert_eq!(
        outcome.result.expect("the failure is caught"),
        (Some(20), 1)
    );
    assert_eq!(log.started(), vec!["f", "fallback", "last"]);
    assert_eq!(log.at("last", "start"), ms(30));
}

#[tokio::test(start_paused = true)]
async fn conditional_catches_a_node_aborted_by_an_upstream_failure() {
    let log = Log::new();
    let outcome = BoundaryAborted::runner().execute(&log).await;
    assert_eq!(
        sorted(statuses(&outcome.report)),
        vec![
            ("decision#1", NodeStatus::Completed),
            ("f", NodeStatus::Failed),
            ("fallback", NodeStatus::Completed),
            ("g", NodeStatus::Aborted),
            ("good", NodeStatus::Skipped),
            ("last", NodeStatus::Completed),
        ]
    );
    let g = outcome.report.nodes().iter().find(|n| n.name == "g");
    assert_eq!(
        g.and_then(|n| n.error.as_deref()),
        Some("aborted because `f` failed")
    );
    assert_eq!(outcome.result.expect("the abort is caught"), (Some(20), 1));
    assert_eq!(log.started(), vec!["f", "fallback", "last"]);
}

// ---------------------------------------------------------------------------------------------
// 8. Skipping: a branch is skipped whole; after its Conditional, its nodes read as `Option`.

workflow! {
    /// `inner` reads `t` inside the then branch; `reader` reads `t` after the Conditional, where
    /// `t` may have been skipped, so it sees an `Option<&u64>`; `next` follows by order only.
    Skips(log: &Log, flag: bool) -> (u64, Option<u64>, u64) {
        Sequential {
            Conditional(flag) {
                t = Operation(work(log, "t", 10)),
                inner = Operation(work_on(log, "inner", &t, 1)),
            } else {
                e = Operation(work(log, "e", 20)),
            },
            reader = Operation(work_on(log, "reader", t.unwrap_or(&0), 5)),
            next = Operation(work(log, "next", 3)),
        }
        => (reader, inner.copied(), next)
    }
}

#[tokio::test(start_paused = true)]
async fn branch_nodes_are_skipped_whole_and_read_as_options_after() {
    let log = Log::new();
    let outcome = Skips::runner().execute((&log, false)).await;
    assert_eq!(
        sorted(statuses(&outcome.report)),
        vec![
            ("decision#1", NodeStatus::Completed),
            ("e", NodeStatus::Completed),
            ("inner", NodeStatus::Skipped),
            ("next", NodeStatus::Completed),
            ("reader", NodeStatus::Completed),
            ("t", NodeStatus::Skipped),
        ]
    );
    // `reader` ran with `t` as `None`, after the else branch.
    assert_eq!(
        outcome.result.expect("skips are not failures"),
        (5, None, 3)
    );
    assert_eq!(log.started(), vec!["e", "reader", "next"]);
    assert_eq!(log.at("reader", "start"), ms(20));

    // The then branch: `inner` reads `t` as a plain value, `reader` as `Some`.
    let log = Log::new();
    let outcome = Skips::runner().execute((&log, true)).await;
    assert_eq!(outcome.report.status("e"), Some(NodeStatus::Skipped));
    assert_eq!(outcome.report.count(NodeStatus::Completed), 5);
    assert_eq!(
        outcome.result.expect("then branch succeeds"),
        (15, Some(11), 3)
    );
}

// ---------------------------------------------------------------------------------------------
// 9. Panics.

async fn explode_later(log: &Log, name: &'static str, millis: u64) -> Result<u64, Boom> {
    log.record(name, "start");
    sleep(ms(millis)).await;
    panic!("kaboom in {name}");
}

async fn explode_at_once(name: &'static str) -> Result<u64, Boom> {
    panic!("{name} blew up at its first poll");
}

workflow! {
    /// Two operations panic (one after a sleep, one at its first poll); `q` is independent.
    Panicky(log: &Log) {
        Parallel {
            Sequential {
                p = Operation(explode_later(log, "p", 10)),
                after_p = Operation(work_on(log, "after_p", &p, 1)),
            },
            now = Operation(explode_at_once("now")),
            q = Operation(work(log, "q", 20)),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn panic_fails_only_its_node_with_the_message() {
    let log = Log::new();
    let outcome = Panicky::runner().execute(&log).await;
    assert_eq!(
        sorted(statuses(&outcome.report)),
        vec![
            ("after_p", NodeStatus::Aborted),
            ("now", NodeStatus::Failed),
            ("p", NodeStatus::Failed),
            ("q", NodeStatus::Completed),
        ]
    );
    assert_eq!(log.at("q", "end"), ms(20));
    let err = outcome.result.expect_err("a panic fails the run");
    match err.error_of("p") {
        Some(NodeError::Panicked(message)) => assert_eq!(message, "kaboom in p"),
        other => panic!("expected p to have panicked, got {other:?}"),
    }
    match err.error_of("now") {
        Some(NodeError::Panicked(message)) => {
            assert_eq!(message, "now blew up at its first poll");
        }
        other => panic!("expected now to have panicked, got {other:?}"),
    }
    assert!(matches!(
        err.error_of("after_p"),
        Some(NodeError::Aborted { cause: "p" })
    ));
    assert_eq!(
        err.error_of("p").map(ToString::to_string).as_deref(),
        Some("panicked: kaboom in p")
    );
    let mut failed: Vec<_> = err.failed().map(|f| f.node).collect();
    failed.sort_unstable();
    assert_eq!(failed, vec!["now", "p"]);
}

// ---------------------------------------------------------------------------------------------
// 10. Timeouts and `#[operation]` defaults.

#[operation(name = "slow call", timeout = "50ms")]
async fn slow(log: &Log, name: &'static str, millis: u64) -> Result<u64, Boom> {
    work(log, name, millis).await
}

#[operation(name = "quick call")]
async fn quick(log: &Log, name: &'static str, millis: u64) -> Result<u64, Boom> {
    work(log, name, millis).await
}

workflow! {
    /// Timeouts from the step, from the operation's default, and a step overriding the default.
    Timeouts(log: &Log) {
        Parallel {
            step_limit = Operation(work(log, "step_limit", 100), timeout = "50ms"),
            default_limit = Operation(slow(log, "default_limit", 100)),
            overridden = Operation(slow(log, "overridden", 100), timeout = "200ms"),
            in_time = Operation(work(log, "in_time", 30), timeout = "50ms"),
            named = Operation(quick(log, "named", 70)),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn timeouts_from_step_and_operation_default() {
    let log = Log::new();
    let outcome = Timeouts::runner().execute(&log).await;
    let report = &outcome.report;
    assert_eq!(
        sorted(statuses(report)),
        vec![
            ("default_limit", NodeStatus::Failed),
            ("in_time", NodeStatus::Completed),
            ("named", NodeStatus::Completed),
            ("overridden", NodeStatus::Completed),
            ("step_limit", NodeStatus::Failed),
        ]
    );
    let operation = |name: &str| {
        report
            .nodes()
            .iter()
            .find(|n| n.name == name)
            .and_then(|n| n.operation)
    };
    assert_eq!(operation("step_limit"), None);
    assert_eq!(operation("in_time"), None);
    assert_eq!(operation("default_limit"), Some("slow call"));
    assert_eq!(operation("overridden"), Some("slow call"));
    assert_eq!(operation("named"), Some("quick call"));

    // The timed-out operations were stopped at 50ms: they never logged their end.
    let mut ended = log.ended();
    ended.sort_unstable();
    assert_eq!(ended, vec!["in_time", "named", "overridden"]);
    assert_eq!(log.at("overridden", "end"), ms(100));
    assert_eq!(log.elapsed(), ms(100));

    let err = outcome.result.expect_err("timeouts fail the run");
    for name in ["step_limit", "default_limit"] {
        match err.error_of(name) {
            Some(NodeError::TimedOut(after)) => assert_eq!(*after, ms(50), "{name}"),
            other => panic!("expected {name} to time out, got {other:?}"),
        }
    }
    assert_eq!(
        err.error_of("step_limit")
            .map(ToString::to_string)
            .as_deref(),
        Some("timed out after 50ms")
    );
    assert_eq!(err.failures().len(), 2);
}

// ---------------------------------------------------------------------------------------------
// 11. Concurrency limits.

/// Counts operations in flight and remembers the peak.
#[derive(Debug, Default)]
struct Gauge {
    now: AtomicUsize,
    peak: AtomicUsize,
}

impl Gauge {
    fn peak(&self) -> usize {
        self.peak.load(Ordering::SeqCst)
    }
}

async fn gauged(log: &Log, gauge: &Gauge, name: &'static str) -> Result<u64, Boom> {
    let now = gauge.now.fetch_add(1, Ordering::SeqCst) + 1;
    gauge.peak.fetch_max(now, Ordering::SeqCst);
    let result = work(log, name, 100).await;
    gauge.now.fetch_sub(1, Ordering::SeqCst);
    result
}

workflow! {
    /// Six 100ms operations, two at a time.
    LimitedBlock(log: &Log, gauge: &Gauge) {
        Parallel(max_concurrency = 2) {
            o1 = Operation(gauged(log, gauge, "o1")),
            o2 = Operation(gauged(log, gauge, "o2")),
            o3 = Operation(gauged(log, gauge, "o3")),
            o4 = Operation(gauged(log, gauge, "o4")),
            o5 = Operation(gauged(log, gauge, "o5")),
            o6 = Operation(gauged(log, gauge, "o6")),
        }
    }
}

workflow! {
    /// Six 100ms operations with no limit of their own.
    Unlimited(log: &Log, gauge: &Gauge) {
        Parallel {
            o1 = Operation(gauged(log, gauge, "o1")),
            o2 = Operation(gauged(log, gauge, "o2")),
            o3 = Operation(gauged(log, gauge, "o3")),
            o4 = Operation(gauged(log, gauge, "o4")),
            o5 = Operation(gauged(log, gauge, "o5")),
            o6 = Operation(gauged(log, gauge, "o6")),
        }
    }
}

fn start_times(log: &Log) -> Vec<u128> {
    let mut times: Vec<u128> = log
        .started()
        .iter()
        .map(|name| log.at(name, "start").as_millis())
        .collect();
    times.sort_unstable();
    times
}

#[tokio::test(start_paused = true)]
async fn parallel_max_concurrency_bounds_operations_in_flight() {
    let log = Log::new();
    let gauge = Gauge::default();
    let outcome = LimitedBlock::runner().execute((&log, &gauge)).await;
    outcome.result.expect("all six complete");
    assert_eq!(gauge.peak(), 2);
    assert_eq!(outcome.report.count(NodeStatus::Completed), 6);
    assert_eq!(start_times(&log), vec![0, 0, 100, 100, 200, 200]);
    assert_eq!(log.elapsed(), ms(300));
}

#[tokio::test(start_paused = true)]
async fn runner_max_concurrency_bounds_the_whole_run() {
    // Control: without a limit all six overlap.
    let log = Log::new();
    let gauge = Gauge::default();
    Unlimited::run(&log, &gauge)
        .await
        .expect("unlimited run succeeds");
    assert_eq!(gauge.peak(), 6);
    assert_eq!(log.elapsed(), ms(100));

    let log = Log::new();
    let gauge = Gauge::default();
    let three = NonZeroUsize::new(3).expect("3 is not zero");
    let outcome = Unlimited::runner()
        .max_concurrency(three)
        .execute((&log, &gauge))
        .await;
    outcome.result.expect("limited run succeeds");
    assert_eq!(gauge.peak(), 3);
    assert_eq!(outcome.report.count(NodeStatus::Completed), 6);
    assert_eq!(start_times(&log), vec![0, 0, 0, 100, 100, 100]);
    assert_eq!(log.elapsed(), ms(200));

    // The tighter of the run's limit and the block's limit wins.
    let log = Log::new();
    let gauge = Gauge::default();
    let one = NonZeroUsize::new(1).expect("1 is not zero");
    LimitedBlock::runner()
        .max_concurrency(one)
        .execute((&log, &gauge))
        .await
        .result
        .expect("serial run succeeds");
    assert_eq!(gauge.peak(), 1);
    assert_eq!(log.elapsed(), ms(600));
}

// ---------------------------------------------------------------------------------------------
// 12. Dropping the run future.

/// Sets its flag when dropped.
struct DropGuard<'a>(&'a AtomicBool);

impl Drop for DropGuard<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

async fn hold(log: &Log, dropped: &AtomicBool, name: &'static str) -> Result<u64, Boom> {
    let _guard = DropGuard(dropped);
    work(log, name, 1_000).await
}

workflow! {
    /// Two long operations in flight at once.
    Holding(log: &Log, a_dropped: &AtomicBool, b_dropped: &AtomicBool) {
        Parallel {
            a = Operation(hold(log, a_dropped, "a")),
            b = Operation(hold(log, b_dropped, "b")),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn dropping_the_run_future_drops_operations_in_flight() {
    let log = Log::new();
    let (a_dropped, b_dropped) = (AtomicBool::new(false), AtomicBool::new(false));
    {
        let mut run = pin!(Holding::run(&log, &a_dropped, &b_dropped));
        let mut cx = Context::from_waker(Waker::noop());
        assert!(run.as_mut().poll(&mut cx).is_pending());
        // Both operations are in flight, and alive.
        assert_eq!(log.started(), vec!["a", "b"]);
        assert!(!a_dropped.load(Ordering::SeqCst));
        assert!(!b_dropped.load(Ordering::SeqCst));
    }
    assert!(a_dropped.load(Ordering::SeqCst));
    assert!(b_dropped.load(Ordering::SeqCst));
    assert!(log.ended().is_empty());
}

#[tokio::test(start_paused = true)]
async fn timing_out_the_run_drops_operations_in_flight() {
    let log = Log::new();
    let (a_dropped, b_dropped) = (AtomicBool::new(false), AtomicBool::new(false));
    let run = Holding::run(&log, &a_dropped, &b_dropped);
    let timed = tokio::time::timeout(ms(50), run).await;
    assert!(timed.is_err(), "the run should still be going at 50ms");
    assert!(a_dropped.load(Ordering::SeqCst));
    assert!(b_dropped.load(Ordering::SeqCst));
    assert_eq!(log.started().len(), 2);
    assert!(log.ended().is_empty());
    assert_eq!(log.elapsed(), ms(50));
}

// ---------------------------------------------------------------------------------------------
// 13. The static graph.

async fn plain(n: u64) -> Result<u64, Boom> {
    Ok(n)
}

async fn other(n: u64) -> Result<u64, Boom> {
    Ok(n)
}

workflow! {
    /// A small graph with every edge kind and generated names.
    Shape() {
        Sequential {
            a = Operation(plain(1)),
            Parallel {
                b = Operation(other(a)),
                Operation(plain(2)),
            },
            Conditional(b.is_ok()) {
                Operation(plain(3)),
            } else {
                Operation(other(4)),
            },
            d = Operation(plain(5), after = [a]),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn graph_constant_lists_nodes_kinds_and_edges() {
    let graph = Shape::GRAPH;
    assert_eq!(graph.name(), "Shape");
    assert_eq!(graph.len(), 7);
    assert!(!graph.is_empty());
    let mut nodes: Vec<(&str, NodeKind)> = graph.nodes().iter().map(|n| (n.name, n.kind)).collect();
    nodes.sort_unstable_by_key(|(name, _)| *name);
    assert_eq!(
        nodes,
        vec![
            ("a", NodeKind::Operation),
            ("b", NodeKind::Operation),
            ("d", NodeKind::Operation),
            ("decision#1", NodeKind::Decision),
            ("other", NodeKind::Operation),
            ("plain#1", NodeKind::Operation),
            ("plain#2", NodeKind::Operation),
        ]
    );
    let label = |name: &str| {
        graph
            .node_id(name)
            .map(|id| graph.nodes()[id].label)
            .expect("node exists")
    };
    assert_eq!(label("b"), "other(a)");
    assert_eq!(label("decision#1"), "b.is_ok()");
    // Unnamed steps are named after the function they call, numbered in source order when
    // several call the same one.
    assert_eq!(label("plain#1"), "plain(2)");
    assert_eq!(label("plain#2"), "plain(3)");
    assert_eq!(label("other"), "other(4)");
    assert_eq!(
        edge_names(&graph),
        vec![
            ("a", "b", EdgeKind::Data),
            ("a", "d", EdgeKind::After),
            ("a", "plain#1", EdgeKind::Sequence),
            ("b", "decision#1", EdgeKind::Data),
            ("decision#1", "other", EdgeKind::Else),
            ("decision#1", "plain#2", EdgeKind::Then),
            ("other", "d", EdgeKind::Sequence),
            ("plain#1", "decision#1", EdgeKind::Sequence),
            ("plain#2", "d", EdgeKind::Sequence),
        ]
    );

    let dot = graph.to_dot();
    let mermaid = graph.to_mermaid();
    let display = graph.to_string();
    assert!(dot.starts_with("digraph \"Shape\" {"), "{dot}");
    assert!(mermaid.starts_with("flowchart TD\n"), "{mermaid}");
    assert!(
        display.starts_with("workflow Shape (7 nodes)\n"),
        "{display}"
    );
    for (id, node) in graph.nodes().iter().enumerate() {
        assert!(
            dot.contains(&format!("n{id} [label=\"{}\\n", node.name)),
            "{dot}"
        );
        // Mermaid writes `#` as the entity `#35;`.
        let escaped = node.name.replace('#', "#35;");
        assert!(mermaid.contains(&format!("\"{escaped}\"")), "{mermaid}");
        assert!(display.contains(&format!(" {} [", node.name)), "{display}");
    }
    assert_eq!(dot.matches(" -> ").count(), graph.edges().len());
    assert_eq!(display.lines().count(), 1 + graph.len());
    for edge in graph.edges() {
        assert!(
            dot.contains(&format!("n{} -> n{}", edge.from, edge.to)),
            "{dot}"
        );
        let line = mermaid.lines().find(|l| {
            l.trim_start().starts_with(&format!("n{} ", edge.from))
                && l.ends_with(&format!(" n{}", edge.to))
        });
        assert!(line.is_some(), "edge {edge:?} missing from {mermaid}");
    }

    // The workflow also runs: `b.is_ok()` takes the then branch.
    let outcome = Shape::runner().execute(()).await;
    outcome.result.expect("Shape succeeds");
    assert_eq!(
        outcome.report.status("plain#2"),
        Some(NodeStatus::Completed)
    );
    assert_eq!(outcome.report.status("other"), Some(NodeStatus::Skipped));
}
