//! A node's label in `GRAPH` is its call or test as the user wrote it, on one line.

use std::sync::atomic::{AtomicBool, Ordering};

use flowdag::prelude::*;

async fn parse<T: std::str::FromStr>(text: &str) -> Result<T, std::io::Error> {
    text.parse()
        .map_err(|_| std::io::Error::other(format!("not a number: {text}")))
}

async fn total(values: Vec<u32>) -> Result<u32, std::io::Error> {
    Ok(values.into_iter().sum())
}

async fn echo<T>(value: T) -> Result<T, std::io::Error> {
    Ok(value)
}

static FLAG: AtomicBool = AtomicBool::new(false);

workflow! {
    Labels(s: &str, items: &[u32]) {
        Sequential {
            n = Operation(parse::<u32>(&s)),
            doubled = Operation(total(items.iter().map(|x| x * 2).collect::<Vec<_>>())),
            q = Operation(echo(n.is_multiple_of(2))),
            Conditional(q.is_ok_and(|q| *q) && !FLAG.load(Ordering::Relaxed)) {
                Operation(echo(   doubled   +  1  )),
            },
            spread = Operation(
                echo(
                    [n, doubled]
                        .iter()
                        .copied()
                        .max()
                )
            ),
            Operation(echo(spread /* the largest */ .unwrap_or_default())),
        }
    }
}

fn label(name: &str) -> &'static str {
    let graph = Labels::GRAPH;
    let id = graph
        .node_id(name)
        .unwrap_or_else(|| panic!("no node `{name}`"));
    graph.nodes()[id].label
}

#[test]
fn labels_are_the_source_text() {
    // Generics and references stay tight, as written.
    assert_eq!(label("n"), "parse::<u32>(&s)");
    // A closure and a turbofish in a method chain.
    assert_eq!(
        label("doubled"),
        "total(items.iter().map(|x| x * 2).collect::<Vec<_>>())"
    );
    assert_eq!(label("q"), "echo(n.is_multiple_of(2))");
    // A test with operators, a closure and a path.
    assert_eq!(
        label("decision#1"),
        "q.is_ok_and(|q| *q) && !FLAG.load(Ordering::Relaxed)"
    );
    // Runs of spaces, line breaks and comments become one space.
    assert_eq!(label("echo#1"), "echo( doubled + 1 )");
    assert_eq!(
        label("spread"),
        "echo( [n, doubled] .iter() .copied() .max() )"
    );
    assert_eq!(label("echo#2"), "echo(spread .unwrap_or_default())");
}

#[test]
fn the_workflow_runs() {
    let out = futures::executor::block_on(Labels::run("4", &[1, 2]));
    assert!(out.is_ok(), "{out:?}");
}
