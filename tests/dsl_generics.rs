//! Generic and lifetime-annotated workflows: declared lifetimes that the output may name, type
//! parameters inferred from the arguments or given with a turbofish, `where` clauses, const
//! parameters, and the traits of the generated type.

use std::rc::Rc;

use flowdag::prelude::*;
use flowdag::{Graph, NodeStatus};
use futures::executor::block_on;

/// The error of the operations here.
#[derive(Debug)]
pub struct NotFound(String);

impl std::fmt::Display for NotFound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "no item named {}", self.0)
    }
}

impl std::error::Error for NotFound {}

/// An item of a catalog.
#[derive(Debug, PartialEq)]
pub struct Item {
    name: String,
    price: u64,
}

/// Items by position.
pub struct Catalog {
    items: Vec<Item>,
}

/// What `Lookup` looks for.
pub struct Query {
    name: String,
}

async fn find(catalog: &Catalog, query: &Query) -> Result<usize, NotFound> {
    catalog
        .items
        .iter()
        .position(|item| item.name == query.name)
        .ok_or_else(|| NotFound(query.name.clone()))
}

workflow! {
    /// Two borrowed parameters, and an output that borrows from the first one only: the case
    /// where a plain `-> &Item` is rustc's E0106.
    pub Lookup<'c>(catalog: &'c Catalog, query: &Query) -> &'c Item {
        index = Operation(find(catalog, query))
        => &catalog.items[index]
    }
}

fn catalog() -> Catalog {
    Catalog {
        items: vec![
            Item {
                name: "pen".to_string(),
                price: 2,
            },
            Item {
                name: "ink".to_string(),
                price: 7,
            },
        ],
    }
}

#[test]
fn a_workflow_with_two_borrowed_parameters_returns_a_reference_to_one_of_them() {
    let catalog = catalog();
    // The query lives shorter than the item the run returns: the output borrows the catalog.
    let item = {
        let query = Query {
            name: "ink".to_string(),
        };
        block_on(Lookup::run(&catalog, &query)).expect("ink is in the catalog")
    };
    assert!(std::ptr::eq(item, &catalog.items[1]));
    assert_eq!(item.price, 7);

    let outcome = {
        let query = Query {
            name: "pen".to_string(),
        };
        block_on(Lookup::runner().execute((&catalog, &query)))
    };
    assert!(std::ptr::eq(
        outcome.result.expect("pen is in the catalog"),
        &catalog.items[0]
    ));
    assert_eq!(outcome.report.status("index"), Some(NodeStatus::Completed));

    let query = Query {
        name: "ruler".to_string(),
    };
    let error = block_on(Lookup::run(&catalog, &query)).expect_err("no ruler");
    let cause = error
        .error_of("index")
        .and_then(|e| e.downcast_ref::<NotFound>());
    assert_eq!(cause.map(|e| e.0.as_str()), Some("ruler"), "{error}");
    // A lifetime parameter needs no annotation anywhere.
    assert_eq!(Lookup::GRAPH.name(), "Lookup");
}

async fn keep<T: Clone>(
    items: &[T],
    wanted: &(dyn Fn(&T) -> bool + Sync),
) -> Result<Vec<T>, NotFound> {
    Ok(items.iter().filter(|item| wanted(item)).cloned().collect())
}

async fn count<T>(items: &[T]) -> Result<usize, NotFound> {
    Ok(items.len())
}

workflow! {
    /// Generic over the item type, which the arguments determine.
    pub Keep<T: Clone + Send + Sync>(items: &[T], wanted: &(dyn Fn(&T) -> bool + Sync)) -> (Vec<T>, usize) {
        Parallel {
            kept = Operation(keep(items, wanted)),
            all = Operation(count(items)),
        }
        => (kept.clone(), all)
    }
}

#[test]
fn a_generic_workflow_runs_with_two_types_inferred_from_its_arguments() {
    let numbers = [1u32, 2, 3, 4, 5];
    let odd = |n: &u32| n % 2 == 1;
    let (kept, all) = block_on(Keep::run(&numbers, &odd)).expect("keep never fails");
    assert_eq!((kept, all), (vec![1, 3, 5], 5));

    let words = ["pen".to_string(), "ink".to_string(), "paper".to_string()];
    let short = |word: &String| word.len() == 3;
    let outcome = block_on(Keep::runner().execute((&words, &short)));
    let (kept, all) = outcome.result.expect("keep never fails");
    assert_eq!(kept, ["pen", "ink"]);
    assert_eq!(all, 3);
    assert_eq!(outcome.report.status("kept"), Some(NodeStatus::Completed));

    // One graph for every type.
    assert_eq!(Keep::<u32>::GRAPH.to_dot(), Keep::<String>::GRAPH.to_dot());
}

async fn make<T: Default>() -> Result<T, NotFound> {
    Ok(T::default())
}

workflow! {
    /// A type parameter that no parameter names: a turbofish, or the output's use, says which.
    pub Make<T: Default + Send + Sync>() -> T
    where
        T: Clone,
    {
        value = Operation(make::<T>())
        => value.clone()
    }
}

#[test]
fn a_type_parameter_no_argument_names_is_given_with_a_turbofish() {
    assert_eq!(block_on(Make::<u32>::run()).expect("make never fails"), 0);
    let outcome = block_on(Make::<String>::runner().execute(()));
    assert_eq!(outcome.result.expect("make never fails"), "");
    // Or inferred from where the output goes.
    let value: Vec<u8> = block_on(Make::run()).expect("make never fails");
    assert!(value.is_empty());
    assert_eq!(Make::<u8>::GRAPH.nodes().len(), 1);
}

async fn nth<T>(items: &[T], index: usize) -> Result<&T, NotFound> {
    items
        .get(index)
        .ok_or_else(|| NotFound(format!("item {index}")))
}

workflow! {
    /// A lifetime and a type parameter together; the item is found by position through a
    /// borrowed index, and the output borrows the items.
    pub Nth<'a, T: Sync>(items: &'a [T], index: &usize) -> &'a T {
        found = Operation(nth(items, *index))
        => &items[*index]
    }
}

#[test]
fn a_generic_workflow_returns_a_reference_into_a_generic_parameter() {
    let words = vec!["a".to_string(), "b".to_string()];
    let second = {
        let index = 1;
        block_on(Nth::run(&words, &index)).expect("two words")
    };
    assert!(std::ptr::eq(second, &words[1]));
    let numbers = [10u64, 20, 30];
    let first = {
        let index = 0;
        block_on(Nth::runner().run((&numbers[..], &index))).expect("three numbers")
    };
    assert_eq!(*first, 10);
    let error = block_on(Nth::run(&numbers, &7)).expect_err("no item 7");
    let cause = error
        .error_of("found")
        .and_then(|e| e.downcast_ref::<NotFound>());
    assert_eq!(cause.map(|e| e.0.as_str()), Some("item 7"), "{error}");
}

async fn sum_of<const N: usize>(values: [u64; N]) -> Result<u64, NotFound> {
    Ok(values.iter().sum())
}

workflow! {
    /// A const parameter.
    pub SumOf<const N: usize>(values: [u64; N]) -> u64 {
        total = Operation(sum_of(values))
        => total
    }
}

#[test]
fn a_const_parameter_is_inferred_from_an_array_argument() {
    assert_eq!(block_on(SumOf::run([1, 2, 3])).expect("sums"), 6);
    assert_eq!(block_on(SumOf::<1>::run([4])).expect("sums"), 4);
}

/// Generic over workflows: a generic workflow's instance is a workflow like any other.
fn node_count<W: Workflow>() -> usize {
    W::GRAPH.nodes().len()
}

fn send_sync<T: Send + Sync>() {}

fn send<F: Send>(future: F) -> F {
    future
}

workflow! {
    /// Generic with no bound at all: its type is `Send` and `Sync` whatever `T` is.
    Wrap<T>(value: T) -> usize {
        size = Operation(size_of_value(&value))
        => size
    }
}

async fn size_of_value<T>(value: &T) -> Result<usize, NotFound> {
    Ok(std::mem::size_of_val(value))
}

#[test]
fn a_generic_workflow_type_is_send_and_sync_and_its_run_is_send_when_its_parts_are() {
    send_sync::<Wrap<Rc<u8>>>();
    send_sync::<Keep<u32>>();
    send_sync::<Lookup<'static>>();
    assert_eq!(
        block_on(Wrap::run(Rc::new(1u8))).expect("measures"),
        std::mem::size_of::<Rc<u8>>()
    );
    let outcome = block_on(Wrap::runner().execute(Rc::new(1u8)));
    assert_eq!(
        outcome.result.expect("measures"),
        std::mem::size_of::<Rc<u8>>()
    );
    let numbers = [1u32, 2];
    let all = |_: &u32| true;
    let (kept, _) = block_on(send(Keep::run(&numbers, &all))).expect("keep never fails");
    assert_eq!(kept, [1, 2]);
    assert_eq!(node_count::<Keep<u32>>(), 2);
    assert_eq!(node_count::<Nth<'static, u8>>(), 1);
    let graph: Graph = <Make<u64> as Workflow>::GRAPH;
    assert_eq!(graph.name(), "Make");
}

workflow! {
    /// A generic workflow's run is an operation of another workflow.
    Outer(words: &[String]) -> usize {
        counted = Operation(Keep::run(words, &|word: &String| !word.is_empty()))
        => counted.1
    }
}

#[test]
fn a_generic_workflow_runs_as_an_operation_of_another() {
    let words = ["x".to_string(), String::new()];
    assert_eq!(block_on(Outer::run(&words)).expect("runs"), 2);
}

/// Generic over workflows and their input: `W::Input<'a>` in a parameter implies `W: 'a`.
async fn run_with<'a, W: Workflow>(
    input: W::Input<'a>,
) -> Result<W::Output, flowdag::WorkflowError> {
    Runner::<W>::new().run(input).await
}

/// Generic over workflows without parameters: under `for<'a>`, `W: 'static` comes with it
/// (every workflow without generics is `'static`).
async fn run_unit<W: for<'a> Workflow<Input<'a> = ()> + 'static>() -> Outcome<W::Output> {
    Runner::<W>::new().execute(()).await
}

#[test]
fn code_generic_over_workflows_runs_instances_of_generic_workflows() {
    let numbers = [1u32, 2, 3];
    let big = |n: &u32| *n > 1;
    let (kept, all) = block_on(run_with::<Keep<u32>>((&numbers, &big))).expect("runs");
    assert_eq!((kept, all), (vec![2, 3], 3));
    let outcome = block_on(run_unit::<Make<String>>());
    assert_eq!(outcome.result.expect("runs"), "");
}

async fn describe<T: std::fmt::Debug>(value: &T) -> Result<String, NotFound> {
    Ok(format!("{value:?}"))
}

workflow! {
    /// A signal whose payload is the type parameter: its key is `Await::<T>::VALUE`.
    Await<T: std::fmt::Debug + Send + Sync + 'static>() -> String {
        Sequential {
            value = Signal(value: T),
            text = Operation(describe(&value)),
        }
        => text.clone()
    }
}

#[test]
fn a_generic_workflow_waits_for_a_signal_of_its_type_parameter() {
    let mut runner = Await::<(u8, char)>::runner();
    runner
        .signals()
        .send(Await::<(u8, char)>::VALUE, (7, 'x'))
        .expect("kept for the step");
    assert_eq!(block_on(runner.run(())).expect("runs"), "(7, 'x')");
}

workflow! {
    /// A type parameter that neither the parameters nor the output name: only a turbofish
    /// chooses it.
    TypeName<T: Default + std::fmt::Debug + Send + Sync>() -> String {
        value = Operation(make::<T>())
        => format!("{:?}", value)
    }
}

#[test]
fn a_type_parameter_only_the_body_names_is_chosen_by_a_turbofish() {
    assert_eq!(block_on(TypeName::<u8>::run()).expect("runs"), "0");
    assert_eq!(block_on(TypeName::<Vec<u8>>::run()).expect("runs"), "[]");
}

async fn step<T: Clone>(value: &T) -> Result<T, NotFound> {
    Ok(value.clone())
}

macro_rules! large {
    ($($name:ident)*) => {
        workflow! {
            /// More nodes than the macro keeps inline: the node futures live in an arena.
            Large<'v, T: Clone + Send + Sync>(value: &'v T, other: &T) -> (&'v T, T) {
                Sequential {
                    $( $name = Operation(step(other)), )*
                    last = Operation(step(value)),
                }
                => (value, last.clone())
            }
        }
    };
}

large!(
    a0 a1 a2 a3 a4 a5 a6 a7 a8 a9 b0 b1 b2 b3 b4 b5 b6 b7 b8 b9 c0 c1 c2 c3 c4 c5 c6 c7 c8 c9
    d0 d1 d2 d3 d4 d5 d6 d7 d8 d9 e0 e1 e2 e3 e4 e5 e6 e7 e8 e9 f0 f1 f2 f3 f4 f5 f6 f7 f8 f9
    g0 g1 g2 g3 g4
);

#[test]
fn a_large_generic_workflow_runs_in_an_arena() {
    let value = "kept".to_string();
    let (kept, last) = {
        let other = "other".to_string();
        block_on(Large::run(&value, &other)).expect("runs")
    };
    assert!(std::ptr::eq(kept, &value));
    assert_eq!(last, "kept");
    assert_eq!(Large::<u8>::GRAPH.nodes().len(), 66);
}
