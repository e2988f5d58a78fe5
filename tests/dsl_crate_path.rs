//! `#[flow(crate = path)]` and `#[operation(crate = path)]`: generated code reaches flow through
//! the given path instead of `::flow`, as a crate that renames its dependency needs.
//!
//! `crate::reexported` stands for such a renamed crate: it re-exports flow, with a hidden module
//! of its own that shadows two items of flow's, so the tests can tell which path the generated
//! code took. (Cargo does not let a package depend on itself under another name, which would be
//! the literal case.)

use std::cell::Cell;

use flowdag::prelude::*;

/// flow under another path, as `my_flow` would be.
mod reexported {
    // The rest of flow, as a renamed crate has it (generated code needs only `__private`).
    #[allow(unused_imports)]
    pub use ::flowdag::*;

    /// flow's hidden module, with two items replaced by ones that leave a trace.
    pub mod __private {
        pub use ::flowdag::__private::*;

        thread_local! {
            /// How many runs of this thread went through this module's `execute`.
            pub static RUNS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
        }

        /// flow's `execute`, counted.
        pub fn execute<T: IntoNodes>(
            graph: &'static Graph,
            options: RunSetup,
            tree: T,
        ) -> impl Future<Output = Finished> {
            RUNS.with(|runs| runs.set(runs.get() + 1));
            ::flowdag::__private::execute(graph, options, tree)
        }

        /// flow's `operation_spec`, with a name that says which path built it.
        pub const fn operation_spec(_: &'static str, policy: NodePolicy) -> OperationSpec {
            ::flowdag::__private::operation_spec("through reexported", policy)
        }
    }
}

#[operation(crate = crate::reexported, retries = 1)]
async fn double(n: u64) -> Result<u64, std::io::Error> {
    Ok(n * 2)
}

#[operation]
async fn plain(n: &u64) -> Result<u64, std::io::Error> {
    Ok(*n + 1)
}

workflow! {
    /// Builds its graph and runs through `crate::reexported`.
    #[flow(crate = crate::reexported, failure = FailFast)]
    pub Renamed(n: u64) -> u64 {
        Sequential {
            doubled = Operation(double(n)),
            added = Operation(plain(&doubled)),
        }
        => added
    }
}

workflow! {
    /// Names flow as `::flow`: the default path.
    pub Direct(n: u64) -> u64 {
        doubled = Operation(double(n))
        => doubled
    }
}

fn runs() -> usize {
    reexported::__private::RUNS.with(Cell::get)
}

#[test]
fn a_workflow_runs_through_the_path_it_names() {
    let outcome = futures::executor::block_on(Renamed::runner().execute(20));
    assert_eq!(outcome.result.expect("the run succeeds"), 41);
    assert_eq!(runs(), 1);
    let value = futures::executor::block_on(Renamed::run(1)).expect("the run succeeds");
    assert_eq!(value, 3);
    assert_eq!(runs(), 2);
    assert_eq!(Renamed::GRAPH.name(), "Renamed");
    // The other option of the attribute still applies beside `crate`.
    assert_eq!(Renamed::GRAPH.__plan().failure, FailurePolicy::FailFast);
}

#[test]
fn a_workflow_without_the_option_runs_through_flow() {
    let value = futures::executor::block_on(Direct::run(4)).expect("the run succeeds");
    assert_eq!(value, 8);
    assert_eq!(runs(), 0);
}

#[test]
fn an_operation_is_built_through_the_path_it_names() {
    let outcome = futures::executor::block_on(Renamed::runner().execute(1));
    let report = outcome.report;
    let doubled = report.node("doubled").expect("a node `doubled`");
    assert_eq!(doubled.operation, Some("through reexported"));
    let added = report.node("added").expect("a node `added`");
    assert_eq!(added.operation, Some("plain"));
}
