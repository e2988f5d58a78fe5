//! How long `workflow!` takes to expand generated workflows of 100, 500 and 1000 nodes.
//!
//! The macro's logic is the plain library `flowdag-macros-core`, which this bench calls directly
//! on the tokens of the generated workflows, with proc-macro2's fallback implementation (outside
//! the compiler). Inside rustc the same code talks to the compiler through the proc-macro
//! bridge: benches/compile_time.sh reads that time from `-Z time-passes`.
//!
//! `cargo bench -p flow-benches --bench expand` (criterion; prints the output size first).

use std::time::Duration;

use criterion::{BatchSize, Criterion, Throughput};
use proc_macro2::TokenStream;

/// The generated sources, by shape and size.
const SOURCES: &[(&str, usize, &str)] = &[
    ("chain", 100, include_str!("generated/chain_100.rs")),
    ("chain", 500, include_str!("generated/chain_500.rs")),
    ("chain", 1000, include_str!("generated/chain_1000.rs")),
    ("fan", 100, include_str!("generated/fan_100.rs")),
    ("fan", 500, include_str!("generated/fan_500.rs")),
    ("fan", 1000, include_str!("generated/fan_1000.rs")),
    ("layered", 100, include_str!("generated/layered_100.rs")),
    ("layered", 500, include_str!("generated/layered_500.rs")),
    ("layered", 1000, include_str!("generated/layered_1000.rs")),
];

/// The tokens inside `workflow! { .. }` of a generated file.
fn input(source: &str) -> TokenStream {
    let open = "workflow! {";
    let start = source.find(open).expect("a workflow! invocation") + open.len();
    let end = source.rfind('}').expect("the closing brace");
    source[start..end].parse().expect("generated tokens")
}

fn main() {
    let mut c = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    println!("| shape | nodes | input tokens (chars) | output (chars) | compile errors |");
    println!("|---|---:|---:|---:|---|");
    for &(shape, nodes, source) in SOURCES {
        let tokens = input(source);
        let output = flowdag_macros_core::workflow(tokens.clone()).to_string();
        println!(
            "| {shape} | {nodes} | {} | {} | {} |",
            tokens.to_string().len(),
            output.len(),
            if output.contains("compile_error") {
                "yes"
            } else {
                "none"
            }
        );
        assert!(!output.contains("compile_error"), "{shape} {nodes} expands");
    }
    let mut group = c.benchmark_group("expand");
    for &(shape, nodes, source) in SOURCES {
        let tokens = input(source);
        group.throughput(Throughput::Elements(nodes as u64));
        group.bench_function(format!("{shape}_{nodes}"), |b| {
            b.iter_batched(
                || tokens.clone(),
                flowdag_macros_core::workflow,
                BatchSize::SmallInput,
            )
        });
    }
    group.finish();
    c.final_summary();
}
