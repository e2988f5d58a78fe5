//! How names read inside step expressions: calls, shadowing, fields and clones.

use std::convert::Infallible;

use flowdag::prelude::*;

async fn one() -> Result<u32, Infallible> {
    Ok(1)
}

async fn reject(n: &u32) -> Result<u32, Infallible> {
    Ok(n + 100)
}

workflow! {
    /// A node named like the function another step calls: the call is not a read of the node.
    CallPosition() -> u32 {
        Sequential {
            n = Operation(one()),
            reject = Operation(reject(&n)),
            // Reading node `reject` and calling fn `reject` in one step needs a path, as in Rust.
            again = Operation(crate::reject(&reject)),
        }
        => again
    }
}

workflow! {
    /// `let` and closure parameters shadow node names.
    Shadowing() -> u32 {
        Sequential {
            order = Operation(one()),
            doubled = Operation(async {
                let order = 20u32;
                Ok::<_, Infallible>(order * 2)
            }),
            summed = Operation(async {
                let total: u32 = [1u32, 2, 3].iter().map(|order| order * 10).sum();
                Ok::<_, Infallible>(total + order)
            }),
        }
        => doubled + summed
    }
}

#[tokio::test]
async fn a_name_in_call_position_is_the_function() {
    assert_eq!(CallPosition::run().await.expect("runs"), 201);
    // `again` reads `reject`, and `reject` reads `n`: no edge from a node to a call.
    let graph = CallPosition::GRAPH;
    let edges: Vec<(&str, &str)> = graph
        .edges()
        .iter()
        .map(|e| {
            (
                graph.nodes()[e.from as usize].name,
                graph.nodes()[e.to as usize].name,
            )
        })
        .collect();
    assert_eq!(edges, [("n", "reject"), ("reject", "again")]);
}

#[tokio::test]
async fn let_and_closure_parameters_shadow_nodes() {
    assert_eq!(Shadowing::run().await.expect("runs"), 40 + 61);
    // `doubled` reads no node: its `order` is its own `let`; it runs after `order` by sequence.
    let graph = Shadowing::GRAPH;
    let data: Vec<(&str, &str)> = graph
        .edges()
        .iter()
        .filter(|e| e.kind == flowdag::EdgeKind::Data)
        .map(|e| {
            (
                graph.nodes()[e.from as usize].name,
                graph.nodes()[e.to as usize].name,
            )
        })
        .collect();
    assert_eq!(data, [("order", "summed")]);
}

workflow! {
    /// A capitalised output is a value, not a node name.
    NoneOutput() -> Option<u32> {
        Operation(one())
        => None
    }
}

#[tokio::test]
async fn an_output_may_be_a_plain_value() {
    assert_eq!(NoneOutput::run().await.expect("runs"), None);
}

fn double(v: u32) -> u32 {
    v * 2
}

async fn apply(x: u32, f: fn(u32) -> u32) -> Result<u32, Infallible> {
    Ok(f(x))
}

workflow! {
    /// `double` is a function one edit away from the node `doubles`: the step passes the
    /// function (the node's name bound there for rustc's suggestions changes nothing).
    Hinted() -> u32 {
        Sequential {
            doubles = Operation(apply(3, double)),
            Operation(apply(doubles, double)),
            Operation(apply(1, double)),
        }
        => doubles
    }
}

#[tokio::test]
async fn a_function_named_like_a_node_is_the_function() {
    assert_eq!(Hinted::run().await.expect("runs"), 6);
}
