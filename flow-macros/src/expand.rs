//! Checked DAG -> Rust.
//!
//! The generated code is small per node: a closure that binds the node's inputs and builds its
//! future from the user's expression. Everything else is constant tables (the `GRAPH`) and one
//! call into the runtime's scheduler, which is ordinary code compiled once. Generated code names
//! the runtime only through `::flow::__private`.

use std::collections::HashSet;

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Expr, Ident};

use crate::ctxt::Ctxt;
use crate::graph::{self, Kind, edge};
use crate::names;
use crate::parse::{self, Workflow};
use crate::validate::{self, Checked, Use};

/// Expands one `workflow!` invocation: generated code, or every error found, beside a
/// best-effort skeleton of the workflow type so that one mistake does not cascade.
pub fn workflow(input: TokenStream) -> TokenStream {
    let mut cx = Ctxt::default();
    let workflow = match parse::workflow(input, &mut cx) {
        Ok(workflow) => workflow,
        Err(error) => {
            cx.push(error);
            return errors(cx);
        }
    };
    match (workflow.output_ty.as_ref(), workflow.output.as_ref()) {
        (Some(ty), None) if !workflow.has_output => cx.error(
            ty.span(),
            "the workflow declares an output type but no output; end the body with `=> expression`",
        ),
        (None, Some(expr)) => cx.error(
            expr.span(),
            "the workflow has an output but no output type; declare it after the parameters, as in `Name(..) -> Type`",
        ),
        _ => {}
    }
    let dag = graph::build(&workflow, &mut cx);
    let checked = validate::check(&workflow, dag, &mut cx);
    match (checked, cx.has_errors()) {
        (Some(checked), false) => generate(&workflow, &checked),
        _ => {
            let mut out = errors(cx);
            out.extend(skeleton(&workflow));
            out
        }
    }
}

fn errors(cx: Ctxt) -> TokenStream {
    match cx.into_error() {
        Some(error) => error.to_compile_error(),
        None => quote!(::core::compile_error!("flow: the workflow could not be expanded");),
    }
}

struct Names<'a> {
    workflow: &'a Workflow,
    checked: &'a Checked,
    /// Position of each node id in execution order: the node's runtime index.
    pos: Vec<usize>,
}

impl Names<'_> {
    fn slot(&self, id: usize) -> Ident {
        format_ident!("__flow_slot_{}", self.pos[id], span = Span::mixed_site())
    }

    fn params(&self) -> HashSet<String> {
        self.workflow
            .params
            .iter()
            .map(|p| p.name.to_string())
            .collect()
    }

    /// Rewrites an expression so that every parameter and every node it reads is a place
    /// `(*name)` over a binding `name: &T`.
    fn rewrite<'a>(&self, expr: &Expr, reads: impl IntoIterator<Item = &'a Ident>) -> Expr {
        let mut readable = self.params();
        readable.extend(reads.into_iter().map(Ident::to_string));
        let mut expr = expr.clone();
        names::rewrite(&mut expr, &readable);
        expr
    }
}

fn generate(workflow: &Workflow, checked: &Checked) -> TokenStream {
    let mut pos = vec![0; checked.order.len()];
    for (p, &id) in checked.order.iter().enumerate() {
        pos[id] = p;
    }
    let names = Names {
        workflow,
        checked,
        pos,
    };
    let name = &workflow.name;
    let vis = &workflow.vis;
    let attrs = &workflow.attrs;
    let output_ty = match &workflow.output_ty {
        Some(ty) => quote!(#ty),
        None => quote!(()),
    };
    let param_names: Vec<&Ident> = workflow.params.iter().map(|p| &p.name).collect();
    let param_types: Vec<&syn::Type> = workflow.params.iter().map(|p| &p.ty).collect();

    // One statement per slot and per node, each slot right before the node that fills it, then
    // one call with the tuple tree of the nodes (see `node_statements`).
    let statements: Vec<TokenStream> = checked
        .order
        .iter()
        .map(|&id| node_statements(&names, id))
        .collect();
    let tree = balanced(
        &(0..checked.order.len())
            .map(|p| {
                let node = node_ident(p);
                quote!(#node)
            })
            .collect::<Vec<_>>(),
    );
    // Small workflows keep every node's future inline (no allocation per node); large ones put
    // them in one arena per run, so the run's future does not hold a thousand.
    let execute = if checked.order.len() <= INLINE_LIMIT {
        quote!(execute)
    } else {
        quote!(execute_in_arena)
    };
    let graph = graph_const(&names);
    let output = output(&names);
    let name_str = name.to_string();
    let run_doc = format!(
        "Runs `{name_str}` with default options and returns its output, or a [`WorkflowError`](::flow::WorkflowError) that lists every failed and aborted node."
    );

    quote! {
        #(#attrs)*
        #vis struct #name {
            options: ::flow::__private::RunOptions,
        }

        #[allow(unused_variables, unused_braces, unused_parens, clippy::all)]
        impl #name {
            /// The static graph of this workflow, built at compile time: nodes, edges and
            /// scheduling tables. Draw it with `to_dot()` or `to_mermaid()`.
            #vis const GRAPH: ::flow::__private::Graph = #graph;

            #[doc = #run_doc]
            #vis async fn run(#(#param_names: #param_types),*) -> ::flow::__private::Result<#output_ty, ::flow::__private::WorkflowError> {
                let mut runner = Self::runner();
                // No report is returned: no event log is kept and no per-node report is built.
                runner.options.result_only();
                runner.execute(#(#param_names),*).await.result
            }

            /// A runner with default options: configure it, then call `execute`.
            #vis fn runner() -> Self {
                #name { options: ::flow::__private::RunOptions::default() }
            }

            /// Limits how many operations of one run may be in flight at once.
            #vis fn max_concurrency(mut self, limit: ::core::num::NonZeroUsize) -> Self {
                self.options.max_concurrency(limit);
                self
            }

            /// Adds an observer: it sees every event of the run, synchronously, as it is appended.
            #vis fn observer(mut self, observer: impl ::flow::__private::Observer + 'static) -> Self {
                self.options.observer(observer);
                self
            }

            /// Whether to keep the run's event log in the report (on by default). Off, the report
            /// still has every status, attempt and error, but no times and no events.
            #vis fn record(mut self, record: bool) -> Self {
                self.options.record(record);
                self
            }

            /// Sets the failure policy of this run (the workflow's own is the default).
            #vis fn failure_policy(mut self, policy: ::flow::__private::FailurePolicy) -> Self {
                self.options.failure_policy(policy);
                self
            }

            /// Cancels the run when `token` is cancelled: running operations are dropped and
            /// every unfinished node is aborted.
            #vis fn cancel_on(mut self, token: ::flow::__private::CancelToken) -> Self {
                self.options.cancel_on(token);
                self
            }

            /// Cancels the run when it has run for `after` (needs a tokio runtime with time).
            #vis fn deadline(mut self, after: ::flow::__private::Duration) -> Self {
                self.options.deadline(after);
                self
            }

            /// Runs the workflow and returns its result together with a report of every node.
            ///
            /// Dropping the returned future cancels the run and drops every running operation.
            #vis async fn execute(self, #(#param_names: #param_types),*) -> ::flow::__private::Outcome<#output_ty> {
                #(let #param_names = &#param_names;)*
                #(#statements)*
                let __flow_finished = ::flow::__private::#execute(&Self::GRAPH, self.options, #tree).await;
                __flow_finished.output(move || #output)
            }
        }
    }
}

/// Workflows with at most this many nodes keep node futures inline.
const INLINE_LIMIT: usize = 64;

/// The variable that holds the node at runtime index `p` until the final call.
fn node_ident(p: usize) -> Ident {
    format_ident!("__flow_node_{}", p, span = Span::mixed_site())
}

/// A balanced tree of 2-tuples over `leaves`.
fn balanced(leaves: &[TokenStream]) -> TokenStream {
    match leaves {
        [] => quote!(::core::compile_error!(
            "flow: a workflow needs at least one step"
        )),
        [leaf] => leaf.clone(),
        _ => {
            let (left, right) = leaves.split_at(leaves.len() / 2);
            let left = balanced(left);
            let right = balanced(right);
            quote!((#left, #right))
        }
    }
}

/// The statements of one node: its output slot (a named operation only), then a `let` of the
/// node as a plain tuple: `(make,)` for an operation, whose closure makes its future, and
/// `(Decision, test)` for a decision.
///
/// The shape is chosen for the type checker. A closure passed to a generic function (such as
/// `Op::new`) leaves obligations that every later statement rescans, and a slot declared far
/// from its producer stays untyped until the producer is checked: both made `cargo check`
/// quadratic in the node count. Plain tuples in `let`s, slots declared where they are filled,
/// and one generic call at the end (`IntoNodes`, in the runtime) bring it to about n^1.25
/// (docs/performance.md, "Compile time").
fn node_statements(names: &Names<'_>, id: usize) -> TokenStream {
    let checked = names.checked;
    let node = &checked.dag.nodes[id];
    let uses = &checked.uses[id];
    let expr = names.rewrite(&node.expr, uses.iter().map(|u| &u.ident));
    let span = node.expr.span();
    let var = node_ident(names.pos[id]);
    match node.kind {
        Kind::Operation => {
            let inputs = uses.iter().map(
                |Use {
                     ident,
                     source,
                     optional,
                 }| {
                    let slot = names.slot(*source);
                    if *optional {
                        // In a branch this step is not in: `Option<&T>`, `None` when skipped.
                        quote!(let #ident = &#slot.get();)
                    } else {
                        // No name of the producer here: a constant in each node's code would
                        // keep LLVM from merging the code of nodes of the same shape.
                        quote!(let #ident = ::flow::__private::input(#slot)?;)
                    }
                },
            );
            let awaited = quote_spanned!(span=> (#expr).await);
            let (slot, finish) = if node.name.is_some() {
                let slot = names.slot(id);
                (
                    quote!(let #slot = &::flow::__private::Slot::new();),
                    quote_spanned!(span=> ::flow::__private::complete(#slot, #awaited)),
                )
            } else {
                (
                    TokenStream::new(),
                    quote_spanned!(span=> ::flow::__private::discard(#awaited)),
                )
            };
            let future = quote! {
                async move {
                    #(#inputs)*
                    #finish
                }
            };
            // A step that awaits before it reaches its operation is listened to until the
            // operation's defaults come (`flow_runtime::Deferred`).
            let future = if crate::operation::awaits_inside(quote!(#expr)) {
                quote!(::flow::__private::Deferred::new(#future))
            } else {
                future
            };
            quote! {
                #slot
                let #var = (move || #future,);
            }
        }
        Kind::Decision => {
            let state = Ident::new("__flow_state", Span::mixed_site());
            let inputs = uses.iter().map(
                |Use {
                     ident,
                     source,
                     optional,
                 }| {
                    let slot = names.slot(*source);
                    let index = names.pos[*source];
                    if *optional {
                        // `Option<Result<&T, &NodeError>>`, `None` when skipped.
                        quote!(let #ident = &#state.outcome_if_run(#slot, #index);)
                    } else {
                        quote!(let #ident = &#state.outcome(#slot, #index);)
                    }
                },
            );
            let test = quote_spanned!(span=> { let __flow_test: bool = #expr; __flow_test });
            quote! {
                let #var = (::flow::__private::Decision, move |#state: &::flow::__private::RunState| -> bool {
                    #(#inputs)*
                    #test
                });
            }
        }
    }
}

fn output(names: &Names<'_>) -> TokenStream {
    let checked = names.checked;
    let Some(expr) = &names.workflow.output else {
        return quote!(::flow::__private::Result::Ok(()));
    };
    let inputs = checked.output_uses.iter().map(|(ident, source)| {
        let slot = names.slot(*source);
        if checked.sure[*source] {
            let display = &checked.dag.nodes[*source].display;
            quote!(let #ident = ::flow::__private::require(#slot, #display)?;)
        } else {
            quote!(let #ident = &#slot.get();)
        }
    });
    let expr = names.rewrite(expr, checked.output_uses.iter().map(|(ident, _)| ident));
    let output_ty = match &names.workflow.output_ty {
        Some(ty) => quote!(#ty),
        None => quote!(()),
    };
    let span = expr.span();
    let value = quote_spanned!(span=> { let __flow_output: #output_ty = #expr; __flow_output });
    quote!({
        #(#inputs)*
        ::flow::__private::Result::Ok(#value)
    })
}

fn graph_const(names: &Names<'_>) -> TokenStream {
    let checked = names.checked;
    let dag = &checked.dag;
    let pos = &names.pos;
    let n = checked.order.len();
    let workflow_name = names.workflow.name.to_string();

    // Short local names for the types of the rows: a 1000-node layered graph has ~10,000 edges,
    // and full paths made most of the tokens rustc had to parse.
    let alias = |name: &str| Ident::new(name, Span::mixed_site());
    let (node_info, node_kind) = (alias("__FlowNodeInfo"), alias("__FlowNodeKind"));
    let (edge_ty, edge_kind) = (alias("__FlowEdge"), alias("__FlowEdgeKind"));
    let nodes = checked.order.iter().map(|&id| {
        let node = &dag.nodes[id];
        let display = &node.display;
        let label = graph::source_text(&node.expr);
        let kind = match node.kind {
            Kind::Operation => quote!(#node_kind::Operation),
            Kind::Decision => quote!(#node_kind::Decision),
        };
        let start = node.keyword.span().start();
        let line = start.line as u32;
        let column = start.column as u32 + 1;
        quote! {
            #node_info { name: #display, kind: #kind, label: #label, line: #line, column: #column }
        }
    });

    let mut edges: Vec<(usize, usize, u8)> = dag
        .edges
        .iter()
        .map(|(&(from, to), &why)| (pos[from], pos[to], why))
        .collect();
    edges.sort_unstable();
    let edge_tokens = edges.iter().map(|&(from, to, why)| {
        let kind = if why & edge::THEN != 0 {
            quote!(Then)
        } else if why & edge::ELSE != 0 {
            quote!(Else)
        } else if why & (edge::DATA | edge::OPTIONAL_READ) != 0 {
            quote!(Data)
        } else if why & edge::AFTER != 0 {
            quote!(After)
        } else {
            quote!(Sequence)
        };
        let (from, to) = (from as u32, to as u32);
        quote!(#edge_ty { from: #from, to: #to, kind: #edge_kind::#kind })
    });

    let plan = plan_tables(checked, &edges);
    let Tables {
        pred_count,
        succ_start,
        succ,
        join_pred_count,
        join_succ_start,
        join_succ,
    } = &plan;
    let roots: Vec<u32> = (0..n)
        .filter(|&p| pred_count[p] == 0)
        .map(|p| p as u32)
        .collect();

    let branch = |select: fn(&graph::Node) -> &Vec<usize>| {
        let lists = checked.order.iter().map(move |&id| {
            let mut members: Vec<u32> = select(&dag.nodes[id])
                .iter()
                .map(|&m| pos[m] as u32)
                .collect();
            members.sort_unstable();
            quote!(&[#(#members),*])
        });
        quote!(&[#(#lists),*])
    };
    // Without a decision every list would be empty: none at all, so that a run need not look
    // for decisions (`Plan::then_nodes`).
    let decisions = checked
        .order
        .iter()
        .any(|&id| dag.nodes[id].kind == Kind::Decision);
    let (then_nodes, else_nodes) = if decisions {
        (
            branch(|node| &node.then_nodes),
            branch(|node| &node.else_nodes),
        )
    } else {
        (quote!(&[]), quote!(&[]))
    };

    let group_limits = &dag.group_limits;
    let node_groups = if group_limits.is_empty() {
        quote!(&[])
    } else {
        let lists = checked.order.iter().map(|&id| {
            let groups = dag.nodes[id].groups.iter().map(|&g| g as u32);
            quote!(&[#(#groups),*])
        });
        quote!(&[#(#lists),*])
    };
    let policies = if checked
        .order
        .iter()
        .all(|&id| dag.nodes[id].policy.is_empty())
    {
        quote!(&[])
    } else {
        let policies = checked.order.iter().map(|&id| &dag.nodes[id].policy);
        quote!(&[#(#policies),*])
    };
    let failure = match names.workflow.fail_fast {
        true => quote!(::flow::__private::FailurePolicy::FailFast),
        false => quote!(::flow::__private::FailurePolicy::ContinueIndependent),
    };

    quote! {{
        #[allow(unused_imports)]
        use ::flow::__private::{
            Edge as #edge_ty, EdgeKind as #edge_kind, NodeInfo as #node_info, NodeKind as #node_kind,
        };
        ::flow::__private::Graph {
            name: #workflow_name,
            nodes: &[#(#nodes),*],
            edges: &[#(#edge_tokens),*],
            plan: ::flow::__private::Plan {
                pred_count: &[#(#pred_count),*],
                succ_start: &[#(#succ_start),*],
                succ: &[#(#succ),*],
                roots: &[#(#roots),*],
                join_pred_count: &[#(#join_pred_count),*],
                join_succ_start: &[#(#join_succ_start),*],
                join_succ: &[#(#join_succ),*],
                then_nodes: #then_nodes,
                else_nodes: #else_nodes,
                group_limits: &[#(#group_limits),*],
                node_groups: #node_groups,
                policies: #policies,
                failure: #failure,
            },
        }
    }}
}

/// The scheduling tables of a plan (see `flow_runtime::Plan`).
struct Tables {
    pred_count: Vec<u32>,
    succ_start: Vec<u32>,
    succ: Vec<u32>,
    join_pred_count: Vec<u32>,
    join_succ_start: Vec<u32>,
    join_succ: Vec<u32>,
}

/// Flag bits of a successor entry, as `flow_runtime::Plan` defines them.
const DATA_FLAG: u32 = 1 << 31;
const CAUGHT_FLAG: u32 = 1 << 30;
const JOIN_FLAG: u32 = 1 << 29;

/// Builds the successor lists from `edges` (runtime indices, sorted by source), routing each
/// complete bipartite set of ordering edges through a join.
///
/// A `Sequential` of `Parallel`s makes every exit of one step a predecessor of every entry of
/// the next: `p * s` edges, each a counter decrement at run time. Targets whose ordering
/// predecessors (sequence and `after` edges that a test does not catch) are the same set share
/// one join when that saves entries (`p * s > p + s`): each source lists the join, the join
/// lists the targets. An edge that also carries data keeps a direct data entry beside the join,
/// so a skipped source still skips its reader, and an edge a test catches stays direct.
fn plan_tables(checked: &Checked, edges: &[(usize, usize, u8)]) -> Tables {
    let dag = &checked.dag;
    let n = checked.order.len();
    let is_decision = |p: usize| dag.nodes[checked.order[p]].kind == Kind::Decision;
    let caught =
        |to: usize, why: u8| why & (edge::DATA | edge::OPTIONAL_READ) != 0 && is_decision(to);
    let ordering =
        |to: usize, why: u8| why & (edge::SEQUENCE | edge::AFTER) != 0 && !caught(to, why);

    // Each target's ordering predecessors, and the targets that share each such set.
    let mut ordering_preds: Vec<Vec<u32>> = vec![Vec::new(); n];
    for &(from, to, why) in edges {
        if ordering(to, why) {
            ordering_preds[to].push(from as u32);
        }
    }
    let mut groups: std::collections::BTreeMap<&[u32], Vec<usize>> = Default::default();
    for (to, preds) in ordering_preds.iter().enumerate() {
        if preds.len() > 1 {
            groups.entry(preds.as_slice()).or_default().push(to);
        }
    }
    // join_of[to]: the join that carries `to`'s ordering edges.
    let mut join_of: Vec<Option<u32>> = vec![None; n];
    let mut join_sources: Vec<&[u32]> = Vec::new();
    let mut join_succ_start = vec![0];
    let mut join_succ = Vec::new();
    for (preds, targets) in &groups {
        let (p, t) = (preds.len(), targets.len());
        if p * t <= p + t {
            continue;
        }
        let join = join_sources.len() as u32;
        for &to in targets {
            join_of[to] = Some(join);
        }
        join_sources.push(preds);
        join_succ.extend(targets.iter().map(|&t| t as u32));
        join_succ_start.push(join_succ.len() as u32);
    }
    // The joins each source feeds, in join order.
    let mut feeds: Vec<Vec<u32>> = vec![Vec::new(); n];
    for (join, sources) in join_sources.iter().enumerate() {
        for &from in *sources {
            feeds[from as usize].push(join as u32);
        }
    }

    let mut pred_count = vec![0u32; n];
    let mut succ_start = Vec::with_capacity(n + 1);
    let mut succ = Vec::with_capacity(edges.len());
    let mut cursor = 0;
    for (from, joins) in feeds.iter().enumerate() {
        succ_start.push(succ.len() as u32);
        succ.extend(joins.iter().map(|&join| join | JOIN_FLAG));
        while cursor < edges.len() && edges[cursor].0 == from {
            let (_, to, why) = edges[cursor];
            cursor += 1;
            let joined = join_of[to].is_some() && ordering(to, why);
            if joined && why & edge::DATA == 0 {
                continue;
            }
            pred_count[to] += 1;
            let mut entry = to as u32;
            if why & edge::DATA != 0 {
                entry |= DATA_FLAG;
            }
            if caught(to, why) {
                entry |= CAUGHT_FLAG;
            }
            succ.push(entry);
        }
    }
    succ_start.push(succ.len() as u32);
    for (to, join) in join_of.iter().enumerate() {
        if join.is_some() {
            pred_count[to] += 1;
        }
    }
    Tables {
        pred_count,
        succ_start,
        succ,
        join_pred_count: join_sources.iter().map(|s| s.len() as u32).collect(),
        join_succ_start,
        join_succ,
    }
}

/// The workflow type with its methods, but no body: emitted beside errors so that code using
/// the workflow still type-checks and only the real mistakes are reported.
fn skeleton(workflow: &Workflow) -> TokenStream {
    let name = &workflow.name;
    let vis = &workflow.vis;
    let attrs = &workflow.attrs;
    let output_ty = match &workflow.output_ty {
        Some(ty) => quote!(#ty),
        None => quote!(()),
    };
    // Each parameter once: a duplicate is already reported, and rustc should not repeat it.
    let mut seen = HashSet::new();
    let params: Vec<_> = workflow
        .params
        .iter()
        .filter(|p| seen.insert(p.name.to_string()))
        .collect();
    let param_names: Vec<&Ident> = params.iter().map(|p| &p.name).collect();
    let param_types: Vec<&syn::Type> = params.iter().map(|p| &p.ty).collect();
    quote! {
        #(#attrs)*
        #vis struct #name {
            options: ::flow::__private::RunOptions,
        }

        #[allow(unused_variables, dead_code, clippy::all)]
        impl #name {
            /// The static graph of this workflow (empty: the workflow has errors).
            #vis const GRAPH: ::flow::__private::Graph = ::flow::__private::Graph {
                name: ::core::stringify!(#name),
                nodes: &[],
                edges: &[],
                plan: ::flow::__private::Plan::EMPTY,
            };
            /// Runs the workflow (not available: the workflow has errors).
            #vis async fn run(#(#param_names: #param_types),*) -> ::flow::__private::Result<#output_ty, ::flow::__private::WorkflowError> {
                ::core::panic!("the workflow has compile errors")
            }
            /// A runner (not available: the workflow has errors).
            #vis fn runner() -> Self {
                #name { options: ::flow::__private::RunOptions::default() }
            }
            /// Limits concurrency (not available: the workflow has errors).
            #vis fn max_concurrency(self, limit: ::core::num::NonZeroUsize) -> Self {
                self
            }
            /// Adds an observer (not available: the workflow has errors).
            #vis fn observer(self, observer: impl ::flow::__private::Observer + 'static) -> Self {
                self
            }
            /// Keeps the event log (not available: the workflow has errors).
            #vis fn record(self, record: bool) -> Self {
                self
            }
            /// Sets the failure policy (not available: the workflow has errors).
            #vis fn failure_policy(self, policy: ::flow::__private::FailurePolicy) -> Self {
                self
            }
            /// Cancels on a token (not available: the workflow has errors).
            #vis fn cancel_on(self, token: ::flow::__private::CancelToken) -> Self {
                self
            }
            /// Sets a deadline (not available: the workflow has errors).
            #vis fn deadline(self, after: ::flow::__private::Duration) -> Self {
                self
            }
            /// Runs the workflow (not available: the workflow has errors).
            #vis async fn execute(self, #(#param_names: #param_types),*) -> ::flow::__private::Outcome<#output_ty> {
                ::core::panic!("the workflow has compile errors")
            }
        }
    }
}
