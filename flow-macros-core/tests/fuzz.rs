//! Property and fuzz tests: `workflow!` never panics, whatever it is given.
//!
//! Every input goes through [`flowdag_macros_core::workflow`] under `catch_unwind`, and the output must be
//! either code without `compile_error!` that parses as a Rust file, or a set of
//! `compile_error!` invocations (beside the workflow's skeleton, which must parse too).
//!
//! Inputs come from three sources:
//! - a recursive generator of well-formed DSL with random names, references, `after` lists and
//!   options, valid and invalid ([`workflows`]);
//! - token-level mutations of valid inputs: delete, duplicate, swap, replace, regroup, unwrap,
//!   truncate, insert stray punctuation ([`mutated`]);
//! - hand-written nasty inputs ([`NASTY`] and the generated giants in [`nasty_inputs`]).
//!
//! The seed is fixed so that runs are reproducible; `PROPTEST_RNG_SEED=<u64>` and
//! `PROPTEST_CASES=<n>` override it and the case counts for a longer hunt, as in
//! `PROPTEST_CASES=50000 PROPTEST_RNG_SEED=7 cargo test -p flowdag-macros-core --test fuzz`.

use std::cell::Cell;
use std::fmt::Write as _;
use std::panic::{AssertUnwindSafe, catch_unwind};

use proc_macro2::{Delimiter, Group, Span, TokenStream, TokenTree};
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::{Config, RngSeed, TestCaseError, TestError, TestRunner};

// ---------------------------------------------------------------------------------------------
// The property
// ---------------------------------------------------------------------------------------------

/// What one expansion gave.
#[derive(Debug)]
enum Verdict {
    /// Generated code, without `compile_error!`; it parses as a Rust file.
    Code,
    /// The messages of the `compile_error!` invocations, in order.
    Errors(Vec<String>),
}

/// Expands `input` and checks the property; `Err` explains how it was broken.
fn check(input: TokenStream) -> Result<Verdict, String> {
    check_with(flowdag_macros_core::workflow, input)
}

fn check_with(
    expand: impl FnOnce(TokenStream) -> TokenStream,
    input: TokenStream,
) -> Result<Verdict, String> {
    let output = match catch_unwind(AssertUnwindSafe(|| expand(input))) {
        Ok(output) => output,
        Err(payload) => {
            let message = payload
                .downcast_ref::<&str>()
                .map(|s| (*s).to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "<non-string payload>".to_string());
            return Err(format!("`workflow!` panicked: {message}"));
        }
    };
    let mut messages = Vec::new();
    compile_errors(output.clone(), &mut messages)?;
    if let Err(error) = syn::parse2::<syn::File>(output.clone()) {
        let what = if messages.is_empty() {
            "generated code"
        } else {
            "errors and skeleton"
        };
        return Err(format!(
            "the output ({what}) does not parse as a Rust file: {error}\noutput: {output}"
        ));
    }
    if messages.is_empty() {
        Ok(Verdict::Code)
    } else {
        Ok(Verdict::Errors(messages))
    }
}

/// Collects the message of every `compile_error!(..)` in `tokens`, at any depth.
fn compile_errors(tokens: TokenStream, out: &mut Vec<String>) -> Result<(), String> {
    let trees: Vec<TokenTree> = tokens.into_iter().collect();
    for (i, tree) in trees.iter().enumerate() {
        match tree {
            TokenTree::Ident(ident) if ident == "compile_error" => {
                let (Some(TokenTree::Punct(bang)), Some(TokenTree::Group(args))) =
                    (trees.get(i + 1), trees.get(i + 2))
                else {
                    return Err("`compile_error` is not followed by `!(..)`".to_string());
                };
                if bang.as_char() != '!' {
                    return Err("`compile_error` is not followed by `!`".to_string());
                }
                let message = syn::parse2::<syn::LitStr>(args.stream())
                    .map_err(|e| format!("`compile_error!` does not hold one string literal: {e}"))?
                    .value();
                if message.trim().is_empty() {
                    return Err("`compile_error!` with an empty message".to_string());
                }
                out.push(message);
            }
            TokenTree::Group(group) => compile_errors(group.stream(), out)?,
            _ => {}
        }
    }
    Ok(())
}

fn parse(source: &str) -> TokenStream {
    source.parse().expect("test inputs are valid token trees")
}

/// Expands `source`, which must give code without errors.
#[track_caller]
fn assert_code(source: &str) {
    match check(parse(source)) {
        Ok(Verdict::Code) => {}
        Ok(Verdict::Errors(errors)) => {
            panic!("expected code for\n{source}\nbut got errors: {errors:#?}")
        }
        Err(why) => panic!("{why}\ninput: {source}"),
    }
}

/// Checks that `source` gives exactly one error, and that it contains `expected`.
#[track_caller]
fn assert_one_error(source: &str, expected: &str) {
    let errors = assert_errors(source, &[expected]);
    assert_eq!(
        errors.len(),
        1,
        "one error for\n{source}\nerrors: {errors:#?}"
    );
}

/// Expands `source`, which must give errors, among them one containing each of `expected`.
#[track_caller]
fn assert_errors(source: &str, expected: &[&str]) -> Vec<String> {
    match check(parse(source)) {
        Ok(Verdict::Errors(errors)) => {
            for text in expected {
                assert!(
                    errors.iter().any(|e| e.contains(text)),
                    "no error contains {text:?} for\n{source}\nerrors: {errors:#?}"
                );
            }
            errors
        }
        Ok(Verdict::Code) => panic!("expected errors for\n{source}\nbut got code"),
        Err(why) => panic!("{why}\ninput: {source}"),
    }
}

/// A runner with a fixed seed (unless `PROPTEST_RNG_SEED` is set), no failure files, and
/// `cases` cases (unless `PROPTEST_CASES` is set).
fn runner(cases: u32) -> TestRunner {
    let base = Config::default();
    let cases = if std::env::var_os("PROPTEST_CASES").is_some() {
        base.cases
    } else {
        cases
    };
    let rng_seed = match base.rng_seed {
        RngSeed::Random => RngSeed::Fixed(0x5eed_f10e),
        seed => seed,
    };
    TestRunner::new(Config {
        cases,
        failure_persistence: None,
        rng_seed,
        max_shrink_iters: 4096,
        ..base
    })
}

/// Runs the property over `strategy`; `input` turns a generated value into the macro's input.
/// Returns how many cases gave code and how many gave errors.
fn run_property<S: Strategy>(
    cases: u32,
    strategy: S,
    input: impl Fn(&S::Value) -> TokenStream,
) -> (u32, u32) {
    let code = Cell::new(0u32);
    let errors = Cell::new(0u32);
    let result = runner(cases).run(&strategy, |value| match check(input(&value)) {
        Ok(Verdict::Code) => {
            code.set(code.get() + 1);
            Ok(())
        }
        Ok(Verdict::Errors(_)) => {
            errors.set(errors.get() + 1);
            Ok(())
        }
        Err(why) => Err(TestCaseError::fail(why)),
    });
    match result {
        Ok(()) => (code.get(), errors.get()),
        Err(TestError::Fail(why, value)) => {
            panic!("minimal failing input:\n{}\n\n{why}", input(&value))
        }
        Err(TestError::Abort(why)) => panic!("the property test was aborted: {why}"),
    }
}

// ---------------------------------------------------------------------------------------------
// (a) Random well-formed DSL
// ---------------------------------------------------------------------------------------------

/// Node names that several steps may take (duplicates) and that parameters may shadow.
const POOL: [&str; 5] = ["a", "b", "c", "d", "e"];
/// Parameter names; `a` shadows a pool node name.
const PARAMS: [&str; 4] = ["p", "q", "a", "r"];
const PARAM_TYPES: [&str; 4] = ["u32", "&str", "Vec<u8>", "&'static [(u8, bool)]"];
const DURATIONS: [&str; 14] = [
    "250ms",
    "2s",
    "1m30s",
    "1h",
    "0s",
    "5 parsecs",
    "",
    "ms",
    "5",
    "99999999999999999999h",
    "18446744073709551615h",
    "1x",
    "\u{ff11}s",
    " 1s ",
];
/// Resilience options, valid and not.
const POLICY: [&str; 20] = [
    "retries = 3",
    "retries = 0",
    "retries = 4294967296",
    "retries = -1",
    "retries = \"3\"",
    "backoff = \"100ms\"",
    "backoff = \"0ms\"",
    "backoff = \"fast\"",
    "backoff = exponential(\"100ms\", \"5s\")",
    "backoff = exponential(\"5s\", \"100ms\")",
    "backoff = exponential(\"1s\")",
    "backoff = exponential()",
    "backoff = exponential(\"1s\", \"2s\", \"3s\")",
    "backoff = exponential(1, x)",
    "backoff = linear(\"1s\")",
    "backoff = 5",
    "jitter = true",
    "jitter = false",
    "jitter = 1",
    "jitter = \"yes\"",
];
const CONCURRENCY: [&str; 11] = [
    "1",
    "2",
    "3",
    "16",
    "0",
    "4294967295",
    "4294967296",
    "-1",
    "\"4\"",
    "1.5",
    "x",
];

#[derive(Clone, Debug)]
enum GName {
    /// A name no other step has.
    Fresh,
    /// A name from [`POOL`], which other steps may have too.
    Pool(usize),
}

/// A name an expression or an `after` list refers to.
#[derive(Clone, Debug)]
enum GRef {
    /// The k-th named step before this one: in source order for a messy workflow (an earlier
    /// step, a sibling or the other branch, depending on the structure), among the steps that
    /// surely ran before for a tidy one; `ghost` if there is none.
    Back(usize),
    /// The k-th named step after this one in source order.
    Forward(usize),
    Pool(usize),
    Param(usize),
    /// A name that is neither a node nor a parameter.
    Ghost,
}

#[derive(Clone, Debug)]
enum GOpt {
    After(Vec<GRef>),
    AfterNotList(GRef),
    /// `timeout` or `deadline` with one of [`DURATIONS`].
    Duration(bool, usize),
    TimeoutInt,
    /// `key = value` from [`POLICY`].
    Policy(usize),
    MaxConcurrency(usize),
    /// `when = ..` with one of [`WHENS`].
    When(usize),
    /// `exclusive = ..` with one of [`GROUPS`].
    Exclusive(usize),
    Unknown,
}

#[derive(Clone, Debug)]
enum GStep {
    Op {
        name: Option<GName>,
        /// Which call shape, and the names its arguments read.
        shape: usize,
        refs: Vec<(GRef, usize)>,
        opts: Vec<GOpt>,
    },
    Seq(Vec<GOpt>, Vec<GStep>, bool),
    Par(Vec<GOpt>, Vec<GStep>, bool),
    Cond {
        test: Vec<GRef>,
        then: Vec<GStep>,
        otherwise: Option<Vec<GStep>>,
    },
}

#[derive(Clone, Debug)]
struct GWorkflow {
    /// See [`Render`].
    tidy: bool,
    doc: bool,
    vis: usize,
    params: Vec<(usize, usize)>,
    output_ty: bool,
    output: Option<Vec<GRef>>,
    body: Vec<GStep>,
    trailing_comma: bool,
}

fn gref() -> impl Strategy<Value = GRef> {
    prop_oneof![
        6 => (0..4usize).prop_map(GRef::Back),
        1 => (0..3usize).prop_map(GRef::Forward),
        2 => (0..POOL.len()).prop_map(GRef::Pool),
        2 => (0..PARAMS.len()).prop_map(GRef::Param),
        1 => Just(GRef::Ghost),
    ]
}

fn op_opt() -> impl Strategy<Value = GOpt> {
    prop_oneof![
        6 => prop::collection::vec(gref(), 0..4).prop_map(GOpt::After),
        1 => gref().prop_map(GOpt::AfterNotList),
        4 => (any::<bool>(), 0..DURATIONS.len()).prop_map(|(t, i)| GOpt::Duration(t, i)),
        1 => Just(GOpt::TimeoutInt),
        3 => (0..POLICY.len()).prop_map(GOpt::Policy),
        1 => (0..CONCURRENCY.len()).prop_map(GOpt::MaxConcurrency),
        1 => (0..WHENS.len()).prop_map(GOpt::When),
        1 => (0..GROUPS.len()).prop_map(GOpt::Exclusive),
        1 => Just(GOpt::Unknown),
    ]
}

fn block_opt() -> impl Strategy<Value = GOpt> {
    prop_oneof![
        6 => (0..CONCURRENCY.len()).prop_map(GOpt::MaxConcurrency),
        1 => Just(GOpt::Unknown),
        1 => (any::<bool>(), 0..DURATIONS.len()).prop_map(|(t, i)| GOpt::Duration(t, i)),
        1 => (0..POLICY.len()).prop_map(GOpt::Policy),
        1 => prop::collection::vec(gref(), 0..2).prop_map(GOpt::After),
        1 => (0..WHENS.len()).prop_map(GOpt::When),
        1 => (0..GROUPS.len()).prop_map(GOpt::Exclusive),
    ]
}

fn op_step() -> impl Strategy<Value = GStep> {
    let name = prop_oneof![3 => Just(None), 4 => Just(Some(GName::Fresh)), 1 => (0..POOL.len()).prop_map(|i| Some(GName::Pool(i)))];
    let opts = prop_oneof![4 => Just(Vec::new()), 2 => prop::collection::vec(op_opt(), 1..3)];
    (
        name,
        0..8usize,
        prop::collection::vec((gref(), 0..5usize), 0..3),
        opts,
    )
        .prop_map(|(name, shape, refs, opts)| GStep::Op {
            name,
            shape,
            refs,
            opts,
        })
}

fn steps_of(inner: BoxedStrategy<GStep>) -> impl Strategy<Value = Vec<GStep>> + Clone {
    prop_oneof![1 => Just(Vec::new()), 14 => prop::collection::vec(inner, 1..5)]
}

fn step() -> impl Strategy<Value = GStep> {
    op_step().prop_recursive(4, 40, 4, |inner| {
        let steps = steps_of(inner);
        let block_opts = prop_oneof![5 => Just(Vec::new()), 2 => prop::collection::vec(block_opt(), 1..3)];
        let seq_opts = prop_oneof![12 => Just(Vec::new()), 1 => prop::collection::vec(block_opt(), 1..2)];
        prop_oneof![
            3 => (seq_opts, steps.clone(), any::<bool>()).prop_map(|(o, s, t)| GStep::Seq(o, s, t)),
            3 => (block_opts, steps.clone(), any::<bool>()).prop_map(|(o, s, t)| GStep::Par(o, s, t)),
            2 => (prop::collection::vec(gref(), 0..3), steps.clone(), prop::option::of(steps))
                .prop_map(|(test, then, otherwise)| GStep::Cond { test, then, otherwise }),
        ]
    })
}

fn workflows() -> impl Strategy<Value = GWorkflow> {
    let params = prop::collection::vec((0..PARAMS.len(), 0..PARAM_TYPES.len()), 0..4);
    let output = prop::option::of(prop::collection::vec(gref(), 0..3));
    let body = prop_oneof![1 => Just(Vec::new()), 20 => prop::collection::vec(step(), 1..4)];
    // The output type mostly matches the output; sometimes not, which is an error.
    let mismatch = prop::bool::weighted(0.1);
    (
        any::<bool>(),
        any::<bool>(),
        0..3usize,
        params,
        mismatch,
        output,
        body,
        any::<bool>(),
    )
        .prop_map(
            |(tidy, doc, vis, params, mismatch, output, body, trailing_comma)| GWorkflow {
                tidy,
                doc,
                vis,
                params,
                output_ty: output.is_some() != mismatch,
                output,
                body,
                trailing_comma,
            },
        )
}

/// Where options are written.
#[derive(Clone, Copy, PartialEq)]
enum Place {
    Op,
    Sequential,
    Parallel,
}

/// Indices of the valid entries of [`DURATIONS`], [`POLICY`] and [`CONCURRENCY`].
const VALID_DURATIONS: usize = 4;
const VALID_POLICY: [usize; 8] = [0, 1, 5, 6, 8, 10, 16, 17];
const VALID_CONCURRENCY: usize = 4;

/// Values of `when`: the first two are valid.
const WHENS: [&str; 4] = ["all_done", "one_failed", "all_donee", "3"];
/// Values of `exclusive`: the first two are valid.
const GROUPS: [&str; 4] = ["\"ledger\"", "\"audit\"", "\"\"", "ledger"];

/// Renders a generated workflow as source text.
///
/// A messy workflow is written as generated: references go to names by source order, to
/// pool names, to undeclared parameters; options may be invalid. A tidy workflow reads only
/// names that surely ran before, declares its parameters once, keeps valid options only and
/// fills empty blocks, so that most tidy workflows expand to code.
struct Render {
    tidy: bool,
    /// The names of the named operations, in source order.
    names: Vec<String>,
    /// How many named operations have been rendered so far.
    seen: usize,
    fresh: usize,
    /// The names of the operations that surely ran before the current point.
    visible: Vec<String>,
    params: Vec<String>,
    out: String,
}

impl Render {
    fn name(&mut self, name: &GName) -> String {
        match name {
            GName::Pool(i) if !self.tidy => POOL[*i].to_string(),
            _ => {
                self.fresh += 1;
                format!("n{}", self.fresh)
            }
        }
    }

    /// The text of a reference made by a step; `named_self` if the step is named (its own
    /// name is then at `seen - 1`).
    fn reference(&self, r: &GRef, named_self: bool) -> String {
        if self.tidy {
            let pick = |list: &[String], k: usize| {
                list.get(list.len().wrapping_sub(1 + k % list.len().max(1)))
                    .cloned()
            };
            let found = match r {
                GRef::Param(i) => pick(&self.params, *i),
                GRef::Back(k) | GRef::Forward(k) | GRef::Pool(k) => pick(&self.visible, *k),
                GRef::Ghost => None,
            };
            return found.unwrap_or_else(|| "ghost".to_string());
        }
        let before = if named_self { self.seen - 1 } else { self.seen };
        let after = self.seen;
        let found = match r {
            GRef::Back(k) => before.checked_sub(k + 1).map(|i| self.names[i].clone()),
            GRef::Forward(k) => self.names.get(after + k).cloned(),
            GRef::Pool(i) => Some(POOL[*i].to_string()),
            GRef::Param(i) => Some(PARAMS[*i].to_string()),
            GRef::Ghost => None,
        };
        found.unwrap_or_else(|| "ghost".to_string())
    }

    /// The options, each as `key = value`.
    fn opts(&self, opts: &[GOpt], named_self: bool, place: Place) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for opt in opts {
            let tidy = self.tidy;
            let text = match opt {
                GOpt::After(refs) if tidy && (refs.is_empty() || place != Place::Op) => continue,
                GOpt::After(refs) => {
                    let list: Vec<String> = refs
                        .iter()
                        .map(|r| match r {
                            // Tidy: `after` names only nodes that ran before.
                            GRef::Param(k) if tidy => self.reference(&GRef::Back(*k), named_self),
                            _ => self.reference(r, named_self),
                        })
                        .filter(|name| !tidy || name != "ghost")
                        .collect();
                    if list.is_empty() && tidy {
                        continue;
                    }
                    format!("after = [{}]", list.join(", "))
                }
                GOpt::AfterNotList(_) if tidy => continue,
                GOpt::AfterNotList(r) => format!("after = {}", self.reference(r, named_self)),
                GOpt::Duration(_, i) if tidy && (*i >= VALID_DURATIONS || place != Place::Op) => {
                    continue;
                }
                GOpt::Duration(timeout, i) => {
                    let key = if *timeout { "timeout" } else { "deadline" };
                    format!("{key} = {:?}", DURATIONS[*i])
                }
                GOpt::Policy(i) if tidy && (!VALID_POLICY.contains(i) || place != Place::Op) => {
                    continue;
                }
                GOpt::Policy(i) => POLICY[*i].to_string(),
                GOpt::TimeoutInt if tidy => continue,
                GOpt::TimeoutInt => "timeout = 5".to_string(),
                GOpt::MaxConcurrency(i)
                    if tidy && (*i >= VALID_CONCURRENCY || place != Place::Parallel) =>
                {
                    continue;
                }
                GOpt::MaxConcurrency(i) => format!("max_concurrency = {}", CONCURRENCY[*i]),
                GOpt::When(i) if tidy && (*i >= 2 || place != Place::Op) => continue,
                GOpt::When(i) => format!("when = {}", WHENS[*i]),
                GOpt::Exclusive(i) if tidy && *i >= 2 => continue,
                GOpt::Exclusive(i) => format!("exclusive = {}", GROUPS[*i]),
                GOpt::Unknown if tidy => continue,
                GOpt::Unknown => "colour = \"red\"".to_string(),
            };
            let key = |text: &str| text.split(' ').next().map(str::to_string);
            if tidy && out.iter().any(|o| key(o) == key(&text)) {
                continue;
            }
            out.push(text);
        }
        out
    }

    fn args(&self, refs: &[(GRef, usize)], named_self: bool) -> String {
        let args: Vec<String> = refs
            .iter()
            .map(|(r, form)| {
                let name = self.reference(r, named_self);
                match form {
                    0 => format!("&{name}"),
                    1 => name,
                    2 => format!("{name}.clone()"),
                    3 => format!("{name}.len()"),
                    _ => format!("{name}.field + 1"),
                }
            })
            .collect();
        args.join(", ")
    }

    /// The steps of a block, in sequence or in parallel.
    fn steps(&mut self, steps: &[GStep], trailing_comma: bool, parallel: bool) {
        if steps.is_empty() && self.tidy {
            self.out.push_str("Operation(idle())");
            return;
        }
        let base = self.visible.len();
        let mut defined = Vec::new();
        for (i, step) in steps.iter().enumerate() {
            if i > 0 {
                self.out.push_str(", ");
            }
            self.step(step);
            if parallel {
                defined.extend(self.visible.drain(base..));
            }
        }
        self.visible.extend(defined);
        if trailing_comma && !steps.is_empty() {
            self.out.push(',');
        }
    }

    /// A Conditional's branch: its names are visible after the Conditional, not in the other
    /// branch.
    fn branch(&mut self, steps: &[GStep], trailing_comma: bool) -> Vec<String> {
        let base = self.visible.len();
        self.steps(steps, trailing_comma, false);
        self.visible.drain(base..).collect()
    }

    fn step(&mut self, step: &GStep) {
        match step {
            GStep::Op {
                name,
                shape,
                refs,
                opts,
            } => {
                let named = name.is_some();
                let own = if named {
                    let own = self.names[self.seen].clone();
                    let _ = write!(self.out, "{own} = ");
                    self.seen += 1;
                    Some(own)
                } else {
                    None
                };
                let args = self.args(refs, named);
                let first = refs
                    .first()
                    .map_or_else(|| "ghost".to_string(), |(r, _)| self.reference(r, named));
                let call = match shape {
                    0 => format!("work({args})"),
                    1 => format!("{first}.fetch({args})"),
                    2 => format!("async {{ work({args}).await }}"),
                    3 => format!("(|a, x| work(a, x))({first}, {args})"),
                    4 => format!("work(format!(\"{{}} {{:?}}\", {first}, ({args})))"),
                    5 => format!("work(S {{ {first} }}, {args})"),
                    6 => format!("crate::ops::work::<u8>({args})"),
                    _ => format!("{{ work({args}) }}"),
                };
                let opts: String = self
                    .opts(opts, named, Place::Op)
                    .iter()
                    .map(|o| format!(", {o}"))
                    .collect();
                let _ = write!(self.out, "Operation({call}{opts})");
                self.visible.extend(own);
            }
            GStep::Seq(opts, steps, trailing) | GStep::Par(opts, steps, trailing) => {
                let parallel = matches!(step, GStep::Par(..));
                let place = if parallel {
                    Place::Parallel
                } else {
                    Place::Sequential
                };
                self.out
                    .push_str(if parallel { "Parallel" } else { "Sequential" });
                let opts = self.opts(opts, false, place);
                if !opts.is_empty() {
                    let _ = write!(self.out, "({})", opts.join(", "));
                }
                self.out.push_str(" { ");
                self.steps(steps, *trailing, parallel);
                self.out.push_str(" }");
            }
            GStep::Cond {
                test,
                then,
                otherwise,
            } => {
                let tests: Vec<String> = test
                    .iter()
                    .enumerate()
                    .map(|(i, r)| {
                        let name = self.reference(r, false);
                        if i % 2 == 0 {
                            format!("{name}.is_ok()")
                        } else {
                            format!("{name}.is_err_and(|e| e.is_panic())")
                        }
                    })
                    .collect();
                let test = if tests.is_empty() {
                    "true".to_string()
                } else {
                    tests.join(" && ")
                };
                let _ = write!(self.out, "Conditional({test}) {{ ");
                let mut defined = self.branch(then, true);
                self.out.push_str(" }");
                if let Some(otherwise) = otherwise {
                    self.out.push_str(" else { ");
                    defined.extend(self.branch(otherwise, false));
                    self.out.push_str(" }");
                }
                self.visible.extend(defined);
            }
        }
    }
}

fn collect_names(steps: &[GStep], render: &mut Render) {
    for step in steps {
        match step {
            GStep::Op {
                name: Some(name), ..
            } => {
                let name = render.name(name);
                render.names.push(name);
            }
            GStep::Op { name: None, .. } => {}
            GStep::Seq(_, steps, _) | GStep::Par(_, steps, _) => collect_names(steps, render),
            GStep::Cond {
                then, otherwise, ..
            } => {
                collect_names(then, render);
                if let Some(otherwise) = otherwise {
                    collect_names(otherwise, render);
                }
            }
        }
    }
}

fn render(workflow: &GWorkflow) -> String {
    let tidy = workflow.tidy;
    let mut params: Vec<(usize, usize)> = Vec::new();
    for &(name, ty) in &workflow.params {
        // Tidy: each parameter once, and none named like a node of the pool.
        if !tidy || PARAMS[name] != "a" && params.iter().all(|&(n, _)| n != name) {
            params.push((name, ty));
        }
    }
    let mut r = Render {
        tidy,
        names: Vec::new(),
        seen: 0,
        fresh: 0,
        visible: Vec::new(),
        params: params
            .iter()
            .map(|&(name, _)| PARAMS[name].to_string())
            .collect(),
        out: String::new(),
    };
    collect_names(&workflow.body, &mut r);
    if workflow.doc {
        r.out.push_str("/// A generated workflow.\n");
    }
    r.out.push_str(["", "pub ", "pub(crate) "][workflow.vis]);
    let params: Vec<String> = params
        .iter()
        .map(|&(name, ty)| format!("{}: {}", PARAMS[name], PARAM_TYPES[ty]))
        .collect();
    let _ = write!(r.out, "Generated({})", params.join(", "));
    let output_ty = if tidy {
        workflow.output.is_some()
    } else {
        workflow.output_ty
    };
    if output_ty {
        r.out.push_str(" -> Option<u32>");
    }
    r.out.push_str(" {\n");
    r.steps(&workflow.body, workflow.trailing_comma, false);
    if let Some(output) = &workflow.output {
        r.seen = r.names.len();
        let parts: Vec<String> = output
            .iter()
            .map(|x| r.reference(x, false))
            .filter(|name| !tidy || name != "ghost")
            .collect();
        let expr = match parts.as_slice() {
            [] => "Some(0)".to_string(),
            [one] => one.clone(),
            [one, two] => format!("{one}.copied().map(|x| x + {two})"),
            _ => format!("({})", parts.join(", ")),
        };
        let _ = write!(r.out, "\n=> {expr}");
    }
    r.out.push_str("\n}");
    r.out
}

#[test]
fn generated_workflows_never_panic() {
    let (code, errors) = run_property(1500, workflows(), |w| parse(&render(w)));
    eprintln!("generated workflows: {code} expanded to code, {errors} to errors");
    // The generator must reach code generation often, not only the checks.
    assert!(
        code * 10 >= code + errors,
        "only {code} of {} generated workflows were valid",
        code + errors
    );
    assert!(
        errors * 10 >= code + errors,
        "only {errors} of {} generated workflows were invalid",
        code + errors
    );
}

// ---------------------------------------------------------------------------------------------
// (b) Token-level mutations of valid inputs
// ---------------------------------------------------------------------------------------------

/// Valid workflows, each expanding to code (checked by `valid_corpus_expands_to_code`).
const VALID: &[&str] = &[
    "pub Pattern() {
        Parallel {
            Sequential { one = Operation(step1()), Operation(step3(&one)) },
            Sequential { two = Operation(step2()), Operation(step5(&two)) },
            Operation(step4(), after = [one, two]),
        }
    }",
    "/// Checks out one order.
    pub Checkout(ctx: &AppCtx, order_id: u64) -> Option<Receipt> {
        Sequential {
            order = Operation(fetch_order(ctx, order_id)),
            Parallel(max_concurrency = 2) {
                stock = Operation(reserve_stock(ctx, &order)),
                risk  = Operation(score_risk(&order), timeout = \"500ms\"),
            },
            Conditional(risk.is_ok_and(|r| r.score < 0.8)) {
                receipt = Operation(charge(&order, &stock)),
            } else {
                Operation(reject(ctx, &order)),
            },
        }
        => receipt.cloned()
    }",
    "pub Branchy(flag: bool) -> Option<u32> {
        Sequential {
            a = Operation(step(1)),
            Conditional(flag && a.is_ok()) {
                b = Operation(add(&a, &a)),
            } else {
                Operation(step(0)),
            },
            c = Operation(step(7)),
        }
        => b.copied().map(|b| b + c)
    }",
    "Caught() -> u32 {
        Sequential {
            f = Operation(fail(\"f\")),
            Conditional(f.is_ok()) { Operation(step(1)) } else { Operation(step(2)) },
            last = Operation(step(9), timeout = \"1m30s\"),
        }
        => last
    }",
    "One() { Operation(work()) }",
    "pub(crate) Points(origin: &Point) -> u32 {
        x = Operation(async { Ok::<u32, E>(origin.x) }),
        y = Operation(get(Point { x, y: 2 }), after = [x]),
        Operation(log(format!(\"{x} {}\", y))),
        => x + y
    }",
    "Nested(n: u32) {
        Sequential {
            Conditional(n > 1) {
                Conditional(n > 2) { a = Operation(f(n)) } else { Operation(g(n)) },
                Parallel(max_concurrency = 1) { Operation(h()), Operation(h()) },
            },
            Operation(done(), timeout = \"2s\"),
        }
    }",
    "Closures() {
        a = Operation(make()),
        Operation(apply(|a| a + 1, a.iter().map(|x| x * 2).sum::<u32>())),
    }",
    "Nests(ids: &[u64]) -> u32 {
        Sequential {
            base = Operation(start()),
            Parallel {
                charged = ForEach(id in ids.iter(), max_concurrency = 4, on_failure = collect) {
                    r = Operation(charge(id, &base)),
                    inner = ForEach(x in 0..2u32, min = 1, rest = run) { y = Operation(f(x, r)) => y }
                    => inner.len()
                },
                Sequential { Delay(\"1s\"), Complete(charged) },
            },
            polled = Loop(max = 3, prev = last, on_max = stop) { st = Operation(poll(last)) => st } until (st.ready),
            more = Loop(max = 9, prev = last) while (last.is_none_or(|p| p.more)) { p = Operation(page(last)) => p },
            paid = Workflow(Payment(&base, 2), after = [polled]),
        }
        => charged.len() + polled + paid
    }",
];

/// Single tokens or short sequences that replace a token or group.
const REPLACEMENTS: [&str; 26] = [
    "Operation",
    "Sequential",
    "Parallel",
    "Conditional",
    "else",
    "after",
    "timeout",
    "max_concurrency",
    "0",
    "\"1s\"",
    "\"x\"",
    "'c'",
    "1.5",
    "true",
    "_",
    "self",
    "fn",
    "Self",
    "'a",
    "b\"x\"",
    "r#type",
    "\u{e9}t\u{e9}",
    "=",
    ",",
    "a",
    "n1",
];

/// Stray tokens to insert.
const STRAYS: [&str; 24] = [
    "=>",
    ",",
    "=",
    "->",
    "::",
    ";",
    ":",
    "#",
    "!",
    "?",
    "..",
    "&",
    "|",
    "@",
    "[]",
    "[,]",
    "()",
    "{}",
    "(=>)",
    "{,}",
    "= >",
    ", ,",
    "=> x",
    "after = []",
];

const DELIMITERS: [Delimiter; 4] = [
    Delimiter::Parenthesis,
    Delimiter::Brace,
    Delimiter::Bracket,
    Delimiter::None,
];

#[derive(Clone, Debug)]
enum Mutation {
    Delete(Index),
    Duplicate(Index),
    SwapNext(Index),
    /// Swaps two tokens or groups anywhere, unless one holds the other.
    Swap(Index, Index),
    /// Replaces a token or group with a copy of another one.
    Copy(Index, Index),
    Replace(Index, usize),
    Insert(Index, usize),
    /// Keeps the first tokens (in pre-order), drops the rest.
    Truncate(Index),
    /// Replaces a group with its contents.
    Unwrap(Index),
    /// Changes a group's delimiter, or wraps a token in a group.
    Regroup(Index, usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let index = any::<Index>;
    prop_oneof![
        3 => index().prop_map(Mutation::Delete),
        2 => index().prop_map(Mutation::Duplicate),
        2 => index().prop_map(Mutation::SwapNext),
        2 => (index(), index()).prop_map(|(a, b)| Mutation::Swap(a, b)),
        2 => (index(), index()).prop_map(|(a, b)| Mutation::Copy(a, b)),
        3 => (index(), 0..REPLACEMENTS.len()).prop_map(|(a, r)| Mutation::Replace(a, r)),
        3 => (index(), 0..STRAYS.len()).prop_map(|(a, s)| Mutation::Insert(a, s)),
        1 => index().prop_map(Mutation::Truncate),
        1 => index().prop_map(Mutation::Unwrap),
        1 => (index(), 0..DELIMITERS.len()).prop_map(|(a, d)| Mutation::Regroup(a, d)),
    ]
}

/// A token tree that can be edited in place.
#[derive(Clone)]
enum Tree {
    Leaf(TokenTree),
    Group(Delimiter, Span, Vec<Tree>),
}

fn trees(tokens: TokenStream) -> Vec<Tree> {
    tokens
        .into_iter()
        .map(|tree| match tree {
            TokenTree::Group(g) => Tree::Group(g.delimiter(), g.span(), trees(g.stream())),
            other => Tree::Leaf(other),
        })
        .collect()
}

fn tokens(trees: &[Tree]) -> TokenStream {
    trees
        .iter()
        .map(|tree| match tree {
            Tree::Leaf(leaf) => leaf.clone(),
            Tree::Group(delimiter, span, children) => {
                let mut group = Group::new(*delimiter, tokens(children));
                group.set_span(*span);
                TokenTree::Group(group)
            }
        })
        .collect()
}

/// The path (child indices from the root) of every tree, in pre-order.
fn paths(trees: &[Tree], prefix: &mut Vec<usize>, out: &mut Vec<Vec<usize>>) {
    for (i, tree) in trees.iter().enumerate() {
        prefix.push(i);
        out.push(prefix.clone());
        if let Tree::Group(_, _, children) = tree {
            paths(children, prefix, out);
        }
        prefix.pop();
    }
}

/// The list that holds the tree at `path`, and its index there.
fn parent<'a>(trees: &'a mut Vec<Tree>, path: &[usize]) -> (&'a mut Vec<Tree>, usize) {
    let (last, init) = path.split_last().expect("paths are never empty");
    let mut list = trees;
    for &i in init {
        list = match &mut list[i] {
            Tree::Group(_, _, children) => children,
            Tree::Leaf(_) => unreachable!("a path only goes through groups"),
        };
    }
    (list, *last)
}

fn truncate(trees: &mut Vec<Tree>, keep: &mut usize) {
    for i in 0..trees.len() {
        if *keep == 0 {
            trees.truncate(i);
            return;
        }
        *keep -= 1;
        if let Tree::Group(_, _, children) = &mut trees[i] {
            truncate(children, keep);
        }
    }
}

fn apply(root: &mut Vec<Tree>, mutation: &Mutation) {
    let mut all = Vec::new();
    paths(root, &mut Vec::new(), &mut all);
    if all.is_empty() {
        if let Mutation::Insert(_, stray) = mutation {
            *root = trees(parse(STRAYS[*stray]));
        }
        return;
    }
    let pick = |index: &Index| all[index.index(all.len())].clone();
    match mutation {
        Mutation::Delete(at) => {
            let (list, i) = parent(root, &pick(at));
            list.remove(i);
        }
        Mutation::Duplicate(at) => {
            let (list, i) = parent(root, &pick(at));
            let copy = list[i].clone();
            list.insert(i + 1, copy);
        }
        Mutation::SwapNext(at) => {
            let (list, i) = parent(root, &pick(at));
            if i + 1 < list.len() {
                list.swap(i, i + 1);
            }
        }
        Mutation::Swap(a, b) => {
            let (a, b) = (pick(a), pick(b));
            if a.starts_with(&b) || b.starts_with(&a) {
                return;
            }
            let get = |root: &mut Vec<Tree>, path: &[usize]| {
                let (list, i) = parent(root, path);
                list[i].clone()
            };
            let (tree_a, tree_b) = (get(root, &a), get(root, &b));
            let (list, i) = parent(root, &a);
            list[i] = tree_b;
            let (list, i) = parent(root, &b);
            list[i] = tree_a;
        }
        Mutation::Copy(at, from) => {
            let (list, i) = parent(root, &pick(from));
            let copy = list[i].clone();
            let (list, i) = parent(root, &pick(at));
            list[i] = copy;
        }
        Mutation::Replace(at, with) => {
            let (list, i) = parent(root, &pick(at));
            list.splice(i..=i, trees(parse(REPLACEMENTS[*with])));
        }
        Mutation::Insert(at, stray) => {
            let (list, i) = parent(root, &pick(at));
            list.splice(i..i, trees(parse(STRAYS[*stray])));
        }
        Mutation::Truncate(at) => truncate(root, &mut at.index(all.len())),
        Mutation::Unwrap(at) => {
            let (list, i) = parent(root, &pick(at));
            if let Tree::Group(_, _, children) = list[i].clone() {
                list.splice(i..=i, children);
            }
        }
        Mutation::Regroup(at, delimiter) => {
            let (list, i) = parent(root, &pick(at));
            let delimiter = DELIMITERS[*delimiter];
            list[i] = match list[i].clone() {
                Tree::Group(_, span, children) => Tree::Group(delimiter, span, children),
                leaf @ Tree::Leaf(_) => Tree::Group(delimiter, Span::call_site(), vec![leaf]),
            };
        }
    }
}

fn mutate(source: &str, mutations: &[Mutation]) -> TokenStream {
    let mut root = trees(parse(source));
    for mutation in mutations {
        apply(&mut root, mutation);
    }
    tokens(&root)
}

fn mutated() -> impl Strategy<Value = (String, Vec<Mutation>)> {
    let base = prop_oneof![
        2 => prop::sample::select(VALID).prop_map(str::to_string),
        1 => workflows().prop_map(|w| render(&w)),
    ];
    (base, prop::collection::vec(mutation(), 1..6))
}

#[test]
fn mutated_workflows_never_panic() {
    run_property(2500, mutated(), |(source, mutations)| {
        mutate(source, mutations)
    });
}

// ---------------------------------------------------------------------------------------------
// (c) Hand-written nasty inputs
// ---------------------------------------------------------------------------------------------

const NASTY: &[&str] = &[
    // Almost nothing.
    "",
    "W",
    "pub",
    "pub W",
    "W()",
    "W() {}",
    "W() { , }",
    "W() { , , Operation(f()) ,, }",
    "W {}",
    "W[] {}",
    "W() [] ",
    "W() -> {}",
    "W() -> u32",
    "W() {} extra",
    "W() { Operation(f()) } W2() { Operation(f()) }",
    // Generics.
    "W<() { Operation(f()) }",
    "W<>() { Operation(f()) }",
    "W<'a() { Operation(f()) }",
    "W<'a, 'a>(x: &'a u8) { Operation(f(x)) }",
    "W<'_>(x: &'_ u8) { Operation(f(x)) }",
    "W<'static>(x: &'static u8) { Operation(f(x)) }",
    "W<T, T>(x: T) { Operation(f(x)) }",
    "W<T = u8>(x: T) { Operation(f(x)) }",
    "W<const N: usize = 3>(x: [u8; N]) { Operation(f(x)) }",
    "W<T>(x: T) where { Operation(f(x)) }",
    "W<T>(x: T) where T: { Operation(f(x)) }",
    "W<T>(x: T) where T: Clone where T: Copy { Operation(f(x)) }",
    "W<T>(x: T) where T: Clone -> T { a = Operation(f(x)) => a }",
    "W<T>(x: T) -> T where T: Clone where T: Copy { a = Operation(f(x)) => a }",
    "W<T>(x: T) -> where T: Clone { a = Operation(f(x)) => a }",
    "W() where u8: Copy { Operation(f()) }",
    "W<'a>(x: &'b u8) -> &'c u8 { a = Operation(f(x)) => a }",
    "W<'a>(x: &'a u8) -> &u8 { a = Operation(f(x)) => a }",
    "W<'a>(x: &'a u8) -> Box<dyn Fn(&u8) -> &'_ u8 + '_> { a = Operation(f(x)) => a }",
    "W<'run>(x: &'run u8, y: &u8) -> &'run u8 { a = Operation(f(x, y)) => x }",
    "W<'a, 'run>(x: &'a u8, y: &u8) { Operation(f(x, y)) }",
    // The output arrow.
    "W() { => }",
    "W() -> u32 { => }",
    "W() -> u32 { a = Operation(f()) => }",
    "W() -> u32 { a = Operation(f()) => => a }",
    "W() -> u32 { a = Operation(f()) => a => a }",
    "W() -> u32 { => a }",
    "W() { Operation(f()) => a }",
    "W() -> u32 { Operation(f()) }",
    "W() -> u32 { a = Operation(f()), => a }",
    "W() -> u32 { a = Operation(f()) => ghost }",
    "W() -> u32 { a = Operation(f()) => a, }",
    "W() -> u32 { a = Operation(f()) => p } ",
    "W() { Operation(f()) = > x }",
    "W() { Operation(f()) ==> x }",
    // `name =` with nothing after, or something odd.
    "W() { a = }",
    "W() { a = , Operation(f()) }",
    "W() { a = = Operation(f()) }",
    "W() { a = 1 }",
    "W() { a = (Operation(f())) }",
    "W() { a = Operation(f()) = Operation(g()) }",
    "W() { a = b = Operation(f()) }",
    "W() { a = Parallel { Operation(f()) } }",
    "W() { a = Conditional(x) { Operation(f()) } }",
    // Unbalanced-looking but valid token trees.
    "W() { ((((())))) }",
    "W() { [Operation(f())] }",
    "W() { {Operation(f())} }",
    "W() { (Operation(f())) }",
    "W() { Operation{f()} }",
    "W() { Operation[f()] }",
    "W() { Operation(f())(g()) }",
    "W() { Operation(f()) Operation(g()) }",
    "W() { Operation }",
    "W() { Operation() }",
    "W() { Operation(,) }",
    "W() { Operation(f(),,) }",
    "W() { Operation(f(), after) }",
    "W() { Operation(f(), after =) }",
    "W() { Operation(f(), = 1) }",
    "W() { Operation(f(), after = [,]) }",
    "W() { Operation(f(), after = [a b]) }",
    "W() { Operation(f(), after = []) }",
    "W() { Operation(f(), after = ()) }",
    "W() { Operation(f(), after = [a::b]) }",
    "W() { Operation(f(), after = [1]) }",
    "W() { Operation(f(), after = a) }",
    "W() { Operation(f(), timeout) }",
    "W() { Operation(f(), timeout = ) }",
    "W() { Operation(f(), timeout = \"\") }",
    "W() { Operation(f(), timeout = \"99999999999999999999999999h\") }",
    "W() { Operation(f(), timeout = \"18446744073709551615ms\") }",
    "W() { Operation(f(), timeout = \"18446744073709551615h\") }",
    "W() { Operation(f(), timeout = \"\u{ff11}s\") }",
    "W() { Operation(f(), timeout = \"1\u{e9}\") }",
    "W() { Operation(f(), timeout = \"1s\u{e9}\") }",
    "W() { Operation(f(), timeout = \"\u{e9}\") }",
    "W() { Operation(f(), timeout = \"0ms\") }",
    "W() { Operation(f(), timeout = b\"1s\") }",
    "W() { Operation(f(), timeout = c\"1s\") }",
    "W() { Operation(f(), timeout = r#\"1s\"#) }",
    "W() { Operation(f(), timeout = \"1s\" \"2s\") }",
    "W() { Operation(f(), timeout = 1s) }",
    "W() { Operation(f(), timeout = \"1s\", timeout = \"2s\", timeout = \"3s\") }",
    "W() { Operation(f(), retries = 3, retries = 4) }",
    "W() { Operation(f(), retries = 99999999999) }",
    "W() { Operation(f(), backoff = exponential) }",
    "W() { Operation(f(), backoff = exponential()) }",
    "W() { Operation(f(), backoff = exponential(,)) }",
    "W() { Operation(f(), backoff = exponential(\"0ms\")) }",
    "W() { Operation(f(), backoff = exponential(\"18446744073709551615ms\")) }",
    "W() { Operation(f(), backoff = exponential::<u8>(\"1s\")) }",
    "W() { Operation(f(), backoff = a.exponential(\"1s\")) }",
    "W() { Operation(f(), backoff = crate::exponential(\"1s\")) }",
    "W() { Operation(f(), backoff = [\"1s\"]) }",
    "W() { Operation(f(), jitter = !true) }",
    "W() { Operation(f(), jitter = (true)) }",
    "W() { Operation(f(), deadline = \"0s\", timeout = \"0s\") }",
    "W() { Parallel(max_concurrency = 0) { Operation(f()) } }",
    "W() { Parallel(max_concurrency = 99999999999999999999999999) { Operation(f()) } }",
    "W() { Parallel(max_concurrency = 1u8) { Operation(f()) } }",
    "W() { Parallel(max_concurrency = 0x10) { Operation(f()) } }",
    "W() { Parallel(max_concurrency = -1) { Operation(f()) } }",
    "W() { Parallel(max_concurrency) { Operation(f()) } }",
    "W() { Parallel(max_concurrency = 1, max_concurrency = 2) { Operation(f()) } }",
    "W() { Parallel() { Operation(f()) } }",
    "W() { Parallel(,) { Operation(f()) } }",
    "W() { Parallel { } }",
    "W() { Parallel }",
    "W() { Parallel() }",
    "W() { Parallel[] {} }",
    "W() { Parallel { Operation(f()) } { Operation(g()) } }",
    "W() { Sequential(( )) {} }",
    "W() { Sequential(limit = 1) { Operation(f()) } }",
    "W() { Sequential {} }",
    "W() { Conditional }",
    "W() { Conditional {} }",
    "W() { Conditional() {} }",
    "W() { Conditional(x) }",
    "W() { Conditional(x) {} }",
    "W() { Conditional(x) {} else }",
    "W() { Conditional(x) {} else {} }",
    "W() { Conditional(x) { Operation(f()) } else {} else {} }",
    "W() { Conditional(x) { Operation(f()) } elsewhere { Operation(f()) } }",
    "W() { Conditional(x) { Operation(f()) } else Operation(f()) }",
    "W() { Conditional(x,) { Operation(f()) } }",
    "W() { Conditional(x, y) { Operation(f()) } }",
    "W() { Conditional(let x = 1) { Operation(f()) } }",
    // Non-ident keywords and literals where idents go.
    "1() { Operation(f()) }",
    "\"W\"() { Operation(f()) }",
    "fn() { Operation(f()) }",
    "self() { Operation(f()) }",
    "r#fn() { Operation(f()) }",
    "pub(crate) W() { Operation(f()) }",
    "pub(in crate::a) W() { Operation(f()) }",
    "#[derive(Debug)] W() { Operation(f()) }",
    "#![inner] W() { Operation(f()) }",
    "#[] W() { Operation(f()) }",
    "W<T>() { Operation(f()) }",
    "W(a) { Operation(f()) }",
    "W(a:) { Operation(f()) }",
    "W(,) { Operation(f()) }",
    "W(a: u32,) { Operation(f(a)) }",
    "W(a: u32, a: u32) { Operation(f(a)) }",
    "W(self) { Operation(f()) }",
    "W(&self) { Operation(f()) }",
    "W(1: u32) { Operation(f()) }",
    "W(_: u32) { Operation(f()) }",
    "W(mut a: u32) { Operation(f()) }",
    "W((a, b): (u32, u32)) { Operation(f()) }",
    "W(a: impl Trait) { Operation(f(a)) }",
    "W(a: dyn) { Operation(f(a)) }",
    "W(a: &'a str) { Operation(f(a)) }",
    "W() { 1 = Operation(f()) }",
    "W() { \"a\" = Operation(f()) }",
    "W() { 'a = Operation(f()) }",
    "W() { fn = Operation(f()) }",
    "W() { match = Operation(f()), Operation(g(&match)) }",
    "W() { self = Operation(f()), Operation(g(self)) }",
    "W() { Self = Operation(f()), Operation(g(Self)) }",
    "W() { crate = Operation(f()), Operation(g(crate)) }",
    "W() { super = Operation(f()), Operation(g(super)) }",
    "W() -> u32 { self = Operation(f()) => self }",
    "W() -> u32 { Self = Operation(f()) => Self }",
    "W() { _ = Operation(f()), Operation(g(_)) }",
    "W() -> u32 { _ = Operation(f()) => _ }",
    "W() { r#match = Operation(f()), Operation(g(r#match)) }",
    // A misspelled raw name: the node it is close to is a raw identifier.
    "W() { r#match = Operation(f()), Operation(g(&r#matc)) }",
    "W() { r#a = Operation(f()), Operation(g(a)) }",
    "W() { a = Operation(f()), Operation(g(r#a)) }",
    "W() { \u{e9}t\u{e9} = Operation(f()), Operation(g(&\u{e9}t\u{e9})) }",
    "W() { 1 }",
    "W() { \"Operation\" }",
    "W() { operation(f()) }",
    "W() { Seq { Operation(f()) } }",
    "W() { If(x) { Operation(f()) } }",
    "W() { a = Operation(f()), a }",
    "W() { # }",
    "W() { ; }",
    "W() { Operation(f()); Operation(g()) }",
    // References that cannot work.
    "W() { a = Operation(f(a)) }",
    "W() { a = Operation(f(), after = [a]) }",
    "W() { a = Operation(f(), after = [b]), b = Operation(g(), after = [a]) }",
    "W() { a = Operation(f(&b)), b = Operation(g()) }",
    "W() { Parallel { a = Operation(f(&b)), b = Operation(g(&a)) } }",
    "W() { a = Operation(f()), a = Operation(g()) }",
    "W(a: u32) { a = Operation(f()) }",
    "W() { Conditional(x) { a = Operation(f()) } else { Operation(g(&a)) } }",
    "W() { Conditional(a.is_ok()) { a = Operation(f()) } }",
    "W() { a = Operation(f(|a| a)), Operation(g(|b| a)) }",
    "W() { a = Operation(f()), Operation(g(S { a })) }",
    "W() { a = Operation(f()), Operation(g(S { a: a })) }",
    "W() { a = Operation(f()), Operation(g(m!(a, [a], {a}))) }",
    "W() { a = Operation(f()), Operation(g(<a>::b)) }",
    "W() { a = Operation(f()), Operation(async move { a }) }",
    "W() { a = Operation(f()), Operation(g(a)?) }",
    "W() { a = Operation(f()), Operation(g(for x in a {})) }",
    "W() { a = Operation(f()), Operation(g(match a { a => a })) }",
    "W() { a = Operation(f()), Operation(g({ let a = 1; a })) }",
    // Nests.
    "W() { ForEach }",
    "W() { ForEach() }",
    "W() { ForEach() {} }",
    "W() { ForEach(x) {} }",
    "W() { ForEach(x in) { Operation(f()) } }",
    "W() { ForEach(in xs) { Operation(f()) } }",
    "W() { ForEach(x in xs) }",
    "W() { ForEach(x in xs) {} }",
    "W() { ForEach(x in xs) { => } }",
    "W() { ForEach(x in xs) { => x } }",
    "W() { ForEach(x in stream) { Operation(f(x)) } }",
    "W() { ForEach(x in stream stream) { Operation(f(x)) } }",
    "W() { ForEach(x in xs, ) { Operation(f(x)) } extra }",
    "W() { ForEach(x in xs, min) { Operation(f(x)) } }",
    "W() { ForEach(x in xs, min = 0, rest = run, rest = cancel) { Operation(f(x)) } }",
    "W() { ForEach(x in [], min = 1) { Operation(f(x)) } }",
    "W() { ForEach(x in vec![1; 3], min = 9) { Operation(f(x)) } }",
    "W() { a = ForEach(x in xs) { a = Operation(f(x)) } }",
    "W() { a = ForEach(x in xs) { b = Operation(f(&a)) } }",
    "W() { a = ForEach(x in xs) { x = Operation(f(x)) } }",
    "W() { a = ForEach(x in xs) { b = Operation(f(x)) }, Operation(g(&b)) }",
    "W() -> u32 { a = ForEach(x in xs) { b = Operation(f(x)) } => b }",
    "W() { a = ForEach(x in xs) { b = ForEach(y in x) { c = Operation(f(y)) } }, Operation(g(&c)) }",
    "W() { ForEach(x in xs) { Signal(s: u8), Terminate(()) } }",
    "W() { Loop }",
    "W() { Loop() }",
    "W() { Loop() {} }",
    "W() { Loop(max = 1) {} }",
    "W() { Loop(max = 1) { Operation(f()) } }",
    "W() { Loop(max = 1) { Operation(f()) } until }",
    "W() { Loop(max = 1) { Operation(f()) } until () }",
    "W() { Loop(max = 1) { Operation(f()) } until (x) extra }",
    "W() { Loop(max = 1) while }",
    "W() { Loop(max = 1) while (x) }",
    "W() { Loop(max = 1) while (x) {} }",
    "W() { Loop(max = 1, prev = 3) while (x) { a = Operation(f()) } }",
    "W() { Loop(max = 1, prev = a) { a = Operation(f()) } until (a) }",
    "W() { Loop(max = 1, prev = p) while (p.is_none() && a) { a = Operation(f()) } }",
    "W() { Loop(max = 0, on_max = maybe) { a = Operation(f()) } until (a) }",
    "W() { Loop(max = 1, prev = self) while (self.is_none()) { a = Operation(f()) } }",
    // Keywords as the names a body binds: the body's reads become closure parameters.
    "W() { Loop(max = 3) { fn = Operation(page(last)) => p } until (p) }",
    "W() { Loop(max = 3, prev = p) while (p.is_none()) { self = Operation(f()) } }",
    "W() { ForEach(x in xs) { match = Operation(f(x)), _ = Operation(g(x)) } }",
    "W() { Pick { fn = Signal(s: u8) => { Operation(f()) }, Delay(\"1s\") => { Operation(g()) } } }",
    "W() { Workflow }",
    "W() { Workflow() }",
    "W() { Workflow(Child) }",
    "W() { Workflow(1) }",
    "W() { Workflow(Child(), after = []) }",
    "W() { Workflow(Child(), retries = 3) }",
    "W() { Workflow(<T as X>::Child()) }",
    "W() { Complete }",
    "W() { Complete() }",
    "W() { Complete('a) }",
    "W() { Complete(a, b) }",
    "W() { Complete(ghost) }",
    "W() { a = Operation(f()), Complete(a) }",
    "W() { a = Complete(x) }",
];

fn nest(open: &str, leaf: &str, close: &str, depth: usize) -> String {
    let mut out = String::new();
    for _ in 0..depth {
        out.push_str(open);
    }
    out.push_str(leaf);
    for _ in 0..depth {
        out.push_str(close);
    }
    out
}

#[test]
fn nasty_inputs() {
    let mut inputs: Vec<String> = NASTY.iter().map(|s| s.to_string()).collect();
    for (open, close) in [
        ("Sequential { ", " }"),
        ("Parallel { ", " }"),
        ("Parallel(max_concurrency = 2) { ", " }"),
        ("Conditional(true) { ", " }"),
        ("Sequential { Operation(f()), ", " }"),
    ] {
        inputs.push(format!(
            "W() {{ {} }}",
            nest(open, "a = Operation(f())", close, 200)
        ));
        inputs.push(format!(
            "W() -> u32 {{ {} => a }}",
            nest(open, "a = Operation(f())", close, 200)
        ));
    }
    inputs.push(format!(
        "W() {{ {} }}",
        nest(
            "Conditional(true) { Operation(f()) } else { ",
            "Operation(f())",
            " }",
            200
        )
    ));
    inputs.push(format!(
        "W() {{ Operation(f({})) }}",
        nest("(", "x", ")", 200)
    ));
    inputs.push(format!(
        "W() {{ a = Operation(f()), Operation(g({})) }}",
        nest("[", "a", "]", 200)
    ));
    inputs.push(format!(
        "W() {{ {} }}",
        nest("(", "Operation(f())", ")", 200)
    ));
    inputs.push(format!("W() {{ {} }}", nest("{", "", "}", 200)));
    let ops = |f: &dyn Fn(usize) -> String| (0..2000).map(f).collect::<Vec<_>>().join(", ");
    let all: Vec<String> = (0..2000).map(|i| format!("n{i}")).collect();
    inputs.push(format!(
        "W() {{ Parallel {{ {} }} }}",
        ops(&|_| "Operation(f())".to_string())
    ));
    inputs.push(format!(
        "W() {{ Parallel {{ {} }} }}",
        ops(&|i| format!("n{i} = Operation(f({i}))"))
    ));
    inputs.push(format!(
        "W() {{ Sequential {{ {} }} }}",
        ops(&|i| format!("n{} = Operation(f(&n{i}))", i + 1))
    ));
    inputs.push(format!(
        "W() {{ Parallel {{ {}, Operation(g(), after = [{}]) }} }}",
        ops(&|i| format!("n{i} = Operation(f())")),
        all.join(", ")
    ));
    // A cycle through every node: each member gets an error that names all members, so the
    // output grows with the square of the cycle's length (34 MB for 2000 nodes); keep it short.
    inputs.push(format!(
        "W() {{ Parallel {{ {} }} }}",
        (0..300)
            .map(|i| format!("n{i} = Operation(f(), after = [n{}])", (i + 1) % 300))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    inputs.push(format!(
        "W() {{ Parallel {{ {} }} }}",
        ops(&|_| "a = Operation(f())".to_string())
    ));
    inputs.push(format!(
        "W() {{ Parallel(max_concurrency = 0) {{ {} }} }}",
        ops(&|i| format!(
            "n{i} = Operation(f(&n{}), timeout = \"{i}\")",
            (i + 7) % 2000
        ))
    ));

    // A proc macro runs on rustc's main thread, whose stack is 8 MiB; a test thread has 2 MiB,
    // which syn alone (in a debug build) exhausts on an expression nested ~200 deep.
    let failures = std::thread::Builder::new()
        .stack_size(8 << 20)
        .spawn(move || {
            let mut failures = Vec::new();
            for input in &inputs {
                if let Err(why) = check(parse(input)) {
                    let shown: String = input.chars().take(300).collect();
                    failures.push(format!("input: {shown}\n{why}"));
                }
            }
            failures
        })
        .expect("the test can spawn a thread")
        .join()
        .expect("`check` catches every panic");
    assert!(
        failures.is_empty(),
        "{} nasty inputs broke the property:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

#[test]
fn invisible_groups_are_handled() {
    // Macro-generated input can hold `Delimiter::None` groups (from `$e:expr`); they cannot be
    // written as source text, so build them by hand.
    let none = |source: &str| TokenTree::Group(Group::new(Delimiter::None, parse(source)));
    let cases: Vec<TokenStream> = vec![
        [parse("W()"), TokenStream::from(none("{ Operation(f()) }"))]
            .into_iter()
            .collect(),
        TokenStream::from(none("W() { Operation(f()) }")),
        {
            let body: TokenStream = [
                parse("a = Operation"),
                TokenStream::from(none("(f())")),
                parse(", Operation(g(&a))"),
            ]
            .into_iter()
            .collect();
            let mut out = parse("W()");
            out.extend([TokenTree::Group(Group::new(Delimiter::Brace, body))]);
            out
        },
        {
            let body: TokenStream = [
                TokenStream::from(none("a = Operation(f())")),
                parse(", Operation(g(&a))"),
            ]
            .into_iter()
            .collect();
            let mut out = parse("W()");
            out.extend([TokenTree::Group(Group::new(Delimiter::Brace, body))]);
            out
        },
    ];
    for case in cases {
        let shown = case.to_string();
        if let Err(why) = check(case) {
            panic!("{why}\ninput: {shown}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Deterministic cases
// ---------------------------------------------------------------------------------------------

#[test]
fn the_property_catches_panics_and_bad_output() {
    let input = parse("W() { Operation(f()) }");
    let panicked = check_with(|_| panic!("boom"), input.clone());
    assert!(
        matches!(&panicked, Err(why) if why.contains("panicked: boom")),
        "{panicked:?}"
    );
    let broken = check_with(|_| parse("struct {}"), input.clone());
    assert!(
        matches!(&broken, Err(why) if why.contains("does not parse")),
        "{broken:?}"
    );
    let empty = check_with(|_| parse("::core::compile_error! { \"\" }"), input.clone());
    assert!(
        matches!(&empty, Err(why) if why.contains("empty message")),
        "{empty:?}"
    );
    let errors = check_with(
        |_| parse("::core::compile_error! { \"no\" } struct W;"),
        input,
    );
    assert!(
        matches!(&errors, Ok(Verdict::Errors(e)) if e == &["no"]),
        "{errors:?}"
    );
}

#[test]
fn valid_corpus_expands_to_code() {
    for &source in VALID {
        assert_code(source);
    }
    assert_code("W(p: u32) { Operation(work(p)) }");
    assert_code("W() -> u32 { a = Operation(f()) => a }");
    assert_code(
        "W() { a = Operation(f()), b = Operation(g(&a)), Operation(h(&a, &b), timeout = \"1h\") }",
    );
}

#[test]
fn generic_headers_expand_to_code() {
    assert_code("W<'a, T: Clone>(a: &'a T, b: &u8) -> &'a T { n = Operation(f(a, b)) => a }");
    assert_code("W<T>(x: T) -> T where T: Clone { a = Operation(f(&x)) => a.clone() }");
    assert_code("W<T>(x: T) where T: Clone { Operation(f(&x)) }");
    assert_code("W<const N: usize>(x: [u8; N]) { Operation(f(x)) }");
}

#[test]
fn generic_header_mistakes_give_their_messages() {
    assert_one_error(
        "W<T>(x: T) where T: Clone -> T { a = Operation(f(x)) => a }",
        "the `where` clause goes after the output type, as in `Name<T>(x: T) -> T where T: Clone { .. }`",
    );
    assert_one_error(
        "W(a: &u8, b: &u8) -> &u8 { n = Operation(f(a, b)) => a }",
        "the output type cannot borrow with an elided lifetime; declare a lifetime after the workflow's name and name it in the parameter the output borrows from, as in `W<'a>(x: &'a X, ..) -> &'a T`",
    );
    assert_one_error(
        "W<'a>(a: &'a u8) -> Cow<'_, str> { n = Operation(f(a)) => n }",
        "the output type cannot borrow with an elided lifetime; declare a lifetime after the workflow's name and name it in the parameter the output borrows from, as in `W<'a, ..>(x: &'a X, ..) -> &'a T`",
    );
    assert_one_error(
        "W<'a>(a: &'a u8) -> &'b u8 { n = Operation(f(a)) => a }",
        "undeclared lifetime `'b` in the output type; declare it after the workflow's name, as in `W<'b, ..>(..)`, and name it in the parameter the output borrows from",
    );
    assert_one_error(
        "W<T>(a: &'b T) { Operation(f(a)) }",
        "undeclared lifetime `'b` in a workflow parameter; declare it after the workflow's name, as in `W<'b, ..>(..)`, or write `&T` or `'_` to borrow for as long as the run runs",
    );
    // Lifetimes bound inside the output type are its own.
    assert_code("W() -> Box<dyn Fn(&str) -> bool> { n = Operation(f()) => n }");
}

#[test]
fn invalid_inputs_give_their_messages() {
    assert_errors("", &["expected the workflow's name"]);
    assert_errors("W", &["expected the workflow's parameters in parentheses"]);
    assert_errors("W() {}", &["a workflow needs at least one step"]);
    assert_errors(
        "W() { Operation(f()) } extra",
        &["unexpected tokens after the workflow's body"],
    );
    assert_errors("W() { a = }", &["expected a step after `a =`"]);
    assert_one_error(
        "W() { Loop(max = 3, prev = last) while (last.is_none()) { fn = Operation(page(last)) } }",
        "`fn` is a Rust keyword and cannot name a step; choose another name, or write the raw identifier `r#fn`",
    );
    assert_one_error(
        "W() { self = Operation(f()) }",
        "`self` is a Rust keyword and cannot name a step, not even as a raw identifier",
    );
    assert_one_error(
        "W() { _ = Operation(f()) }",
        "`_` cannot name a step; remove `_ =` to leave the step unnamed",
    );
    assert_one_error(
        "W() { Loop(max = 1, prev = self) while (self.is_none()) { a = Operation(f()) } }",
        "`self` is a Rust keyword and cannot name the previous iteration's output",
    );
    assert_code(
        "W() { Loop(max = 3, prev = last) while (last.is_none()) { r#fn = Operation(page(last)) } }",
    );
    // rustc reports the misspelling, with the raw name as its suggestion.
    assert_code("W() { r#type = Operation(f()), Operation(g(&r#typ)) }");
    assert_errors("W() { a = 1 }", &["expected a step after `a =`: one of"]);
    assert_errors(
        "W() { Operation(f()) => }",
        &["expected the workflow's output expression after `=>`"],
    );
    assert_errors(
        "W() { Seq { Operation(f()) } }",
        &["unknown step `Seq`", "did you mean `Sequential`?"],
    );
    assert_errors(
        "W() { Operation() }",
        &["expected the async call inside `Operation(..)`"],
    );
    assert_errors("W() { Parallel {} }", &["empty `Parallel` block"]);
    assert_errors("W() { Conditional(x) {} }", &["empty `Conditional` branch"]);
    assert_errors(
        "W() { Parallel(max_concurrency = 0) { Operation(f()) } }",
        &["`max_concurrency` must be at least 1"],
    );
    assert_errors(
        "W() { Operation(f(), timeout = \"5 parsecs\") }",
        &["invalid duration \"5 parsecs\" for `timeout`"],
    );
    assert_one_error(
        "W() { Operation(f(), timeout = \"1s\", timeout = \"2s\") }",
        "duplicate option `timeout`: it is already given earlier in this list",
    );
    assert_errors(
        "W() { Operation(f(), colour = 3) }",
        &["unknown option `colour` for an `Operation`"],
    );
    assert_one_error(
        "W() { a = Operation(f()), Operation(g(), when = one_faild) }",
        "unknown trigger rule `one_faild`; did you mean `one_failed`?",
    );
    assert_one_error(
        "W() { Operation(f(), when = all_done) }",
        "`when` on a step that waits for no other step",
    );
    assert_one_error(
        "W() { Sequential(exclusive = \"l\") { Operation(f(), exclusive = \"l\") } }",
        "this section is inside another `exclusive = \"l\"` section",
    );
    assert_errors(
        "W() { Sequential(max_concurrency = 2) { Operation(f()) } }",
        &[
            "unknown option `max_concurrency` for `Sequential`; `max_concurrency` limits a `Parallel` block",
        ],
    );
    assert_one_error(
        "W() { a = Operation(f()), Operation(g(), after = [ghost]) }",
        "`after` names `ghost`, which is no node of this workflow; name the step to wait for, as in `ghost = Operation(..)`",
    );
    assert_one_error(
        "W() { fetch_user = Operation(f()), Operation(g(), after = [fetch_usr]) }",
        "`after` names `fetch_usr`, which is no node of this workflow; did you mean `fetch_user`?",
    );
    assert_one_error(
        "W() { Operation(f(), retires = 3) }",
        "unknown option `retires` for an `Operation`; did you mean `retries`?",
    );
    assert_one_error(
        "W() { Parallel(max_concurency = 3) { Operation(f()) } }",
        "unknown option `max_concurency` for `Parallel`; did you mean `max_concurrency`?",
    );
    assert_one_error(
        "W() { a = Operation(f(), after = [b]), b = Operation(g(), after = [a]) }",
        "`after = [b]` closes a dependency cycle through `a` (line 1), `b` (line 1)",
    );
    assert_errors(
        "W() { a = Operation(f(&a)) }",
        &["`a` reads its own output"],
    );
    assert_errors(
        "W() { a = Operation(f(&b)), b = Operation(g()) }",
        &["`b` (line 1) runs after this step"],
    );
    assert_one_error(
        "W() { Parallel { a = Operation(f()), Operation(g(&a)) } }",
        "`a` (line 1) may run at the same time as this step",
    );
    assert_errors(
        "W() { Conditional(x) { a = Operation(f()) } else { Operation(g(&a)) } }",
        &["`a` (line 1) is in the other branch of the same `Conditional`"],
    );
    assert_one_error(
        "W() { a = Operation(f()), a = Operation(g()) }",
        "duplicate node name `a`: it is already defined on line 1",
    );
    assert_one_error(
        "W(order: u32) { order = Operation(f()) }",
        "node name `order` shadows the workflow parameter `order` (line 1)",
    );
    assert_one_error(
        "W(id: u32, id: u32) { Operation(f(id)) }",
        "duplicate parameter `id`: it is already declared on line 1",
    );
    assert_errors(
        "W() -> u32 { Operation(f()) }",
        &["declares an output type but no output"],
    );
    assert_errors(
        "W() { a = Operation(f()) => a }",
        &["has an output but no output type"],
    );
    assert_one_error(
        "W() -> u32 { a = Operation(f()) => ghost }",
        "the output `ghost` is no node or parameter of this workflow",
    );
    assert_one_error(
        "W(count: u32) -> u32 { total = Operation(f()) => totl }",
        "the output `totl` is no node or parameter of this workflow; did you mean `total`?",
    );
    assert_one_error(
        "W(count: u32) -> u32 { total = Operation(f()) => cont }",
        "the output `cont` is no node or parameter of this workflow; did you mean `count`?",
    );
    // Every mistake of one invocation is reported together.
    let errors = assert_errors(
        "W() { Parallel(max_concurrency = 0) { Operation(f(), colour = 1), }, Operation(g(), after = [ghost]) }",
        &[
            "`max_concurrency` must be at least 1",
            "unknown option `colour`",
            "`after` names `ghost`",
        ],
    );
    assert_eq!(errors.len(), 3, "{errors:#?}");
}

#[test]
fn a_long_cycle_is_one_error_naming_every_member_once() {
    let n = 3000;
    let mut source = String::from("W() { Parallel { ");
    for i in 0..n {
        let before = (i + n - 1) % n;
        write!(source, "n{i} = Operation(f(), after = [n{before}]), ")
            .expect("a String takes writes");
    }
    source.push_str("} }");
    let errors = assert_errors(
        &source,
        &["closes a dependency cycle through `n0` (line 1)"],
    );
    assert_eq!(errors.len(), 1, "one error for one cycle");
    for i in 0..n {
        assert_eq!(
            errors[0].matches(&format!("`n{i}` ")).count(),
            1,
            "`n{i}` named once"
        );
    }
}

#[test]
fn node_code_holds_no_constant_of_its_own() {
    // Nodes of one shape must compile to the same machine code, so that LLVM merges their
    // functions (docs/architecture.md, "Nodes of one shape share code"): a node's closure may
    // hold the user's expression, never a literal of the macro's own, such as the name of the
    // node it reads.
    let output = flowdag_macros_core::workflow(parse(
        "W(x: u64) -> u64 { Sequential { a = Operation(f(x)), b = Operation(g(a)), \
         c = Operation(g(b)), Operation(h(&a, &c)) } => c }",
    ))
    .to_string();
    let opening = "move || async move {";
    let bodies: Vec<&str> = output
        .match_indices(opening)
        .map(|(start, _)| {
            let body = &output[start + opening.len()..];
            let mut depth = 1;
            let end = body
                .char_indices()
                .find_map(|(i, c)| {
                    depth += match c {
                        '{' => 1,
                        '}' => -1,
                        _ => 0,
                    };
                    (depth == 0).then_some(i)
                })
                .expect("each body is closed");
            &body[..end]
        })
        .collect();
    assert_eq!(bodies.len(), 4, "one closure per node: {output}");
    assert_eq!(bodies.iter().filter(|b| b.contains("input")).count(), 3);
    for body in bodies {
        assert!(!body.contains('"'), "a node's code holds a string: {body}");
    }
}
