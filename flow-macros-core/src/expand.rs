//! Checked DAG -> Rust.
//!
//! The generated code is small per node: a closure that binds the node's inputs and builds its
//! future from the user's expression. Everything else is constant tables (the `GRAPH`) and one
//! call into the runtime's scheduler, which is ordinary code compiled once. Generated code names
//! the runtime only through `::flowdag::__private` (or `path::__private` under
//! `#[flow(crate = path)]`), and builds its tables through `const fn`s, never struct literals.
//!
//! Per workflow it emits a unit struct (a generic one for a generic workflow: `generics.rs`),
//! its `Workflow` impl (the graph, and the run's body) and three inherent shortcuts (`GRAPH`,
//! `runner()`, `run(..)`); the builder methods are the runtime's `Runner`'s.

use std::collections::HashSet;

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Expr, Ident};

use crate::ctxt::Ctxt;
use crate::generics;
use crate::graph::{self, Kind, edge};
use crate::names;
use crate::parse::{self, Workflow};
use crate::signals;
use crate::validate::{self, Checked, Use};

/// Expands one `workflow!` invocation: generated code, or every error found, beside a
/// best-effort skeleton of the workflow type so that one mistake does not cascade.
pub fn workflow(input: TokenStream) -> TokenStream {
    let mut cx = Ctxt::default();
    let mut workflow = match parse::workflow(input, &mut cx) {
        Ok(workflow) => workflow,
        Err(error) => {
            cx.push(error);
            return errors(cx);
        }
    };
    if let Some(ty) = &mut workflow.output_ty {
        generics::Lifetimes::new(&workflow.generics, &workflow.name).output_type(ty, &mut cx);
    }
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
    let input = Input::new(&workflow, &mut cx);
    let dag = graph::build(&workflow, &mut cx);
    let declared = signals::declared(&dag, &mut cx);
    let keys = signals::keys(&declared, &workflow.vis, &private_path(&workflow));
    let checked = validate::check(&workflow, dag, &mut cx);
    if let (Some(checked), Some(_)) = (&checked, &workflow.durable) {
        durable_checks(&workflow, checked, &mut cx);
    }
    match (checked, cx.has_errors()) {
        (Some(checked), false) => generate(&workflow, &checked, &input, keys),
        _ => {
            let mut out = errors(cx);
            out.extend(skeleton(&workflow, &input, keys));
            out
        }
    }
}

/// What `#[flow(durable)]` does not support yet, and parameters that cannot be stored (a
/// borrowed one): errors on the user's tokens.
fn durable_checks(workflow: &Workflow, checked: &Checked, cx: &mut Ctxt) {
    if let Some(param) = workflow.generics.params.first() {
        cx.error(
            param.span(),
            "a durable workflow cannot be generic: its runs are resumed by name, from its stored parameters",
        );
    }
    for param in &workflow.params {
        if matches!(param.ty, syn::Type::Reference(_)) {
            cx.error(
                param.ty.span(),
                format!(
                    "parameter `{}` of a durable workflow is stored with the run and must be an owned value (`String`, not `&str`)",
                    param.name
                ),
            );
        }
    }
    for node in &checked.dag.nodes {
        let what = match node.kind {
            Kind::ForEach => "`ForEach`",
            Kind::Loop => "`Loop`",
            Kind::Workflow => "`Workflow`",
            _ => continue,
        };
        cx.error(
            node.keyword.span(),
            format!("{what} steps cannot be journaled yet: remove `#[flow(durable)]` or this step"),
        );
    }
}

fn errors(cx: Ctxt) -> TokenStream {
    match cx.into_error() {
        Some(error) => error.to_compile_error(),
        None => quote!(::core::compile_error!("flow: the workflow could not be expanded");),
    }
}

pub(crate) struct Names<'a> {
    pub(crate) workflow: &'a Workflow,
    /// The path of the runtime's hidden module: `::flowdag::__private`, or the one
    /// `#[flow(crate = path)]` names.
    pub(crate) private: TokenStream,
    pub(crate) checked: &'a Checked,
    /// Position of each node id in execution order: the node's runtime index.
    pub(crate) pos: Vec<usize>,
}

impl Names<'_> {
    pub(crate) fn slot(&self, id: usize) -> Ident {
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
    pub(crate) fn rewrite<'a>(
        &self,
        expr: &Expr,
        reads: impl IntoIterator<Item = &'a Ident>,
    ) -> Expr {
        let mut readable = self.params();
        readable.extend(reads.into_iter().map(Ident::to_string));
        let mut expr = expr.clone();
        names::rewrite(&mut expr, &readable);
        expr
    }
}

fn generate(
    workflow: &Workflow,
    checked: &Checked,
    input: &Input,
    keys: TokenStream,
) -> TokenStream {
    let mut pos = vec![0; checked.order.len()];
    for (p, &id) in checked.order.iter().enumerate() {
        pos[id] = p;
    }
    let names = Names {
        workflow,
        private: private_path(workflow),
        checked,
        pos,
    };
    let private = &names.private;
    let param_names: Vec<&Ident> = workflow.params.iter().map(|p| &p.name).collect();

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
    // A workflow with a `Terminate` step keeps the output it gives in a cell, which the output
    // expression takes first.
    let terminates = checked
        .order
        .iter()
        .any(|&id| checked.dag.nodes[id].kind == Kind::Terminate);
    let (term_cell, output) = if terminates {
        let cell = term_cell();
        let output_ty = match &workflow.output_ty {
            Some(ty) => quote!(#ty),
            None => quote!(()),
        };
        (
            quote!(let #cell = &#private::TermCell::<#output_ty>::new();),
            quote!(match #cell.take() {
                ::core::option::Option::Some(__flow_value) => #private::Result::Ok(__flow_value),
                ::core::option::Option::None => #output,
            }),
        )
    } else {
        (TokenStream::new(), output)
    };
    let options = Ident::new("__flow_options", Span::mixed_site());
    // Only a workflow with `Signal` steps has a mailbox.
    let mailbox = match checked.dag.nodes.iter().any(|n| n.kind == Kind::Signal) {
        true => signals::mailbox_statement(private),
        false => TokenStream::new(),
    };

    let (undo, tree) = compensations(&names, quote!(#options), tree);
    let body = quote! {
        async move {
            #(let #param_names = &#param_names;)*
            #mailbox
            #term_cell
            #(#statements)*
            #undo
            let __flow_finished = #private::#execute(
                &<Self as #private::Workflow>::GRAPH, #options, #tree,
            ).await;
            __flow_finished.output(move || #output)
        }
    };
    // `run`'s parameters, passed on as the input value: the same names as the pattern.
    let value = &input.pattern;
    let run = quote!(#private::Runner::<Self>::new().run(#value));
    interface(workflow, input, &names.private, graph, body, run, keys)
}

/// The compensations of a workflow (or nest body) with `compensate = ..` options: one leaf
/// per compensable step, in execution order, after the forward nodes of the run's node set
/// (`(tree, compensations)`), and the run's options naming each leaf's step. Returns the
/// statements to put before the run and the node tree to run; nothing changes for a workflow
/// without compensations.
pub(crate) fn compensations(
    names: &Names<'_>,
    options: TokenStream,
    tree: TokenStream,
) -> (TokenStream, TokenStream) {
    let checked = names.checked;
    if checked.compensations.is_empty() {
        return (TokenStream::new(), tree);
    }
    let mut undo: Vec<&(usize, syn::Expr, Vec<Use>)> = checked.compensations.iter().collect();
    undo.sort_by_key(|(node, ..)| names.pos[*node]);
    let mut statements = TokenStream::new();
    let mut leaves = Vec::new();
    let mut steps = Vec::new();
    for (k, (node, expr, reads)) in undo.into_iter().enumerate() {
        let span = expr.span();
        let private = respan(&names.private, span);
        let rewritten = names.rewrite(expr, reads.iter().map(|u| &u.ident));
        let inputs = reads.iter().map(
            |Use {
                 ident,
                 source,
                 optional,
             }| {
                let slot = names.slot(*source);
                if *optional {
                    quote!(let #ident = &#slot.get();)
                } else {
                    quote!(let #ident = #private::input(#slot)?;)
                }
            },
        );
        let finish = quote_spanned!(span=> #private::discard((#rewritten).await));
        let var = format_ident!("__flow_undo_{}", k, span = Span::mixed_site());
        statements.extend(quote! {
            let #var = (move || async move {
                #(#inputs)*
                #finish
            },);
        });
        leaves.push(quote!(#var));
        let step = names.pos[*node] as u32;
        steps.push(quote!(#step));
    }
    let private = &names.private;
    let undo_tree = balanced(&leaves);
    statements.extend(quote! {
        let #options = #private::compensated(#options, &[#(#steps),*]);
    });
    (statements, quote!((#tree, #undo_tree)))
}

/// The items every workflow has, around its graph and its run's body: the struct, its
/// `Workflow` impl, and the inherent shortcuts `GRAPH`, `runner()` and `run(..)`. The builder
/// methods are the runtime's `Runner`'s, written once for every workflow.
fn interface(
    workflow: &Workflow,
    input: &Input,
    private: &TokenStream,
    graph: TokenStream,
    body: TokenStream,
    run: TokenStream,
    keys: TokenStream,
) -> TokenStream {
    let name = &workflow.name;
    let vis = &workflow.vis;
    let attrs = &workflow.attrs;
    let output_ty = match &workflow.output_ty {
        Some(ty) => quote!(#ty),
        None => quote!(()),
    };
    let Input {
        ty: input_ty,
        lifetime,
        pattern,
        params,
        run_params,
        marked,
    } = input;
    let declaration = generics::declaration(workflow, &marked.iter().collect::<Vec<_>>());
    let (impl_generics, ty_generics, where_clause) = workflow.generics.split_for_impl();
    // A generic workflow's parameters outlive the run's borrow (`Workflow::Input`).
    let outlives = match workflow.generics.params.is_empty() {
        true => TokenStream::new(),
        false => quote!(where Self: #lifetime),
    };
    let options = Ident::new("__flow_options", Span::mixed_site());
    // On the user's tokens: a `pub` workflow whose parameter or output type is private is
    // rustc's "private type in public interface", which should point at the type.
    let input_span = workflow
        .params
        .first()
        .map_or_else(|| name.span(), |p| p.ty.span());
    let input_item = quote_spanned!(input_span=> type Input<#lifetime> = #input_ty #outlives;);
    let output_span = workflow
        .output_ty
        .as_ref()
        .map_or_else(|| name.span(), |ty| ty.span());
    let output_item = quote_spanned!(output_span=> type Output = #output_ty;);
    let run_doc = format!(
        "Runs `{name}` with default options and returns its output, or a `WorkflowError` that lists every failed and aborted node. `{name}::runner()` sets options and returns a report."
    );
    // With a declared lifetime, `run` returns the runner's future itself: an `async fn` would
    // hold it in a coroutine whose `Send` rustc cannot prove ("implementation of `Workflow` is
    // not general enough", rust-lang/rust#100013), so `tokio::spawn(W::run(..))` would not
    // compile. Its borrows are the run's lifetime, named, as in `Input`, so that the future
    // can capture them. Otherwise `async fn`.
    let result_ty = quote!(#private::Result<#output_ty, #private::WorkflowError>);
    let run_fn = match workflow.generics.lifetimes().next() {
        None => quote! {
            #vis async fn run(#(#params),*) -> #result_ty {
                #run.await
            }
        },
        Some(_) => quote! {
            #vis fn run<#lifetime>(#(#run_params),*) -> impl #private::Future<Output = #result_ty> + #lifetime
            where
                Self: #lifetime,
            {
                #run
            }
        },
    };
    let durable = match &workflow.durable {
        Some(_) => durable_items(workflow, input, private, &output_ty),
        None => TokenStream::new(),
    };
    quote! {
        #(#attrs)*
        #declaration

        #durable

        #[allow(unused_variables, unused_braces, unused_parens, clippy::all)]
        impl #impl_generics #private::Workflow for #name #ty_generics #where_clause {
            const GRAPH: #private::Graph = #graph;
            #input_item
            #output_item

            fn __execute<#lifetime>(
                #options: #private::RunOptions,
                #pattern: <Self as #private::Workflow>::Input<#lifetime>,
            ) -> impl #private::Future<Output = #private::Outcome<#output_ty>> #outlives {
                #body
            }
        }

        #[allow(unused_variables, dead_code, clippy::all)]
        impl #impl_generics #name #ty_generics #where_clause {
            /// The static graph of this workflow, built at compile time: nodes, edges and
            /// scheduling tables. Draw it with `to_dot()` or `to_mermaid()`.
            #vis const GRAPH: #private::Graph = <Self as #private::Workflow>::GRAPH;

            /// A runner with default options: set options (`max_concurrency`, `failure_policy`,
            /// `cancel_on`, `deadline`, `observer`, `record`), then `execute` or `run` it with
            /// the workflow's parameters (`()` for none, the value for one, a tuple for several).
            #vis fn runner() -> #private::Runner<Self> {
                #private::Runner::new()
            }

            #[doc = #run_doc]
            #run_fn

            #keys
        }
    }
}

/// The items of a `#[flow(durable)]` workflow: its `DurableWorkflow` impl, the compile-time
/// checks that its parameters and output can be stored (spanned on their types), and the
/// inherent `resume` and `resume_all`.
fn durable_items(
    workflow: &Workflow,
    input: &Input,
    private: &TokenStream,
    output_ty: &TokenStream,
) -> TokenStream {
    let name = &workflow.name;
    let vis = &workflow.vis;
    let input_ty = &input.ty;
    let lifetime = &input.lifetime;
    let checks = workflow.params.iter().map(|p| {
        let ty = &p.ty;
        quote_spanned!(ty.span()=> #private::assert_durable::<#ty>();)
    });
    let output_check = workflow
        .output_ty
        .as_ref()
        .map(|ty| quote_spanned!(ty.span()=> #private::assert_durable::<#ty>();));
    // Spanned on the parameters' type, so that the bound `Stored: Durable` is reported there
    // and not on the whole invocation.
    let stored_span = workflow
        .params
        .first()
        .map_or_else(|| name.span(), |p| p.ty.span());
    let stored_item =
        quote_spanned!(stored_span=> type Stored = <Self as #private::Workflow>::Input<'static>;);
    quote! {
        #[allow(unused_variables, clippy::all)]
        const _: fn() = || {
            #(#checks)*
            #output_check
        };

        #[allow(unused_variables, clippy::all)]
        impl #private::DurableWorkflow for #name {
            #stored_item

            fn __input<#lifetime>(
                stored: Self::Stored,
            ) -> <Self as #private::Workflow>::Input<#lifetime> {
                let stored: #input_ty = stored;
                stored
            }
        }

        #[allow(unused_variables, dead_code, clippy::all)]
        impl #name {
            /// Resumes the run `id` of this workflow from `store`: replays its journal
            /// (completed steps do not run again) and goes on.
            /// The future owns what it needs (a clone of the store): spawn it if you like.
            #vis fn resume<S: #private::Store + ::core::clone::Clone>(
                store: &S,
                id: &str,
            ) -> impl #private::Future<
                Output = #private::Result<#private::Outcome<#output_ty>, #private::DurableError>,
            > + use<S> {
                #private::resume::<Self, S>(store, id)
            }

            /// Resumes every unfinished run of this workflow in `store`, oldest first.
            #vis fn resume_all<'s, S: #private::Store + ::core::clone::Clone>(
                store: &'s S,
            ) -> impl #private::Future<
                Output = #private::Result<
                    ::std::vec::Vec<(
                        ::std::string::String,
                        #private::Result<#private::Outcome<#output_ty>, #private::DurableError>,
                    )>,
                    #private::DurableError,
                >,
            > + 's {
                #private::resume_all::<Self, S>(store)
            }
        }
    }
}

/// `tokens` with every span set to `span`.
pub(crate) fn respan(tokens: &TokenStream, span: Span) -> TokenStream {
    tokens
        .clone()
        .into_iter()
        .map(|mut token| {
            token.set_span(span);
            token
        })
        .collect()
}

/// `::flowdag::__private`, or `path::__private` under `#[flow(crate = path)]`.
fn private_path(workflow: &Workflow) -> TokenStream {
    match &workflow.krate {
        Some(path) => quote!(#path::__private),
        None => quote!(::flowdag::__private),
    }
}

/// How the workflow's parameters travel: as `Workflow::Input<'r>` (`()`, the one parameter's
/// type, or a tuple), bound by a pattern in `__execute`, and built from the parameters of the
/// inherent `run`.
struct Input {
    /// `Input<'r>`: each parameter's type with every elided lifetime made `'r`.
    ty: TokenStream,
    /// `'r`: the run's borrow (`'a` unless the workflow declares `'a`).
    lifetime: syn::Lifetime,
    /// `()`, `name` or `(a, b)`: the pattern `__execute` binds, and the value `run` passes on.
    pattern: TokenStream,
    /// `name: Type` of `run`, each parameter once.
    params: Vec<TokenStream>,
    /// `name: Type<'r>`: the same, with every elided lifetime made `'r` (as in `ty`).
    run_params: Vec<TokenStream>,
    /// The parameter and output types that name a declared lifetime: the type's marker holds
    /// them (`generics::declaration`).
    marked: Vec<syn::Type>,
}

impl Input {
    /// Reads the parameters; a parameter type that names a lifetime the workflow does not
    /// declare (`&'b T`) or is an `impl Trait` is an error in `cx`, and the types still make a
    /// usable skeleton.
    fn new(workflow: &Workflow, cx: &mut Ctxt) -> Input {
        let lifetimes = generics::Lifetimes::new(&workflow.generics, &workflow.name);
        // Each parameter once: a duplicate is already reported, and rustc should not repeat it.
        let mut seen = HashSet::new();
        let params: Vec<_> = workflow
            .params
            .iter()
            .filter(|p| seen.insert(p.name.to_string()))
            .collect();
        let names: Vec<&Ident> = params.iter().map(|p| &p.name).collect();
        let types: Vec<syn::Type> = params
            .iter()
            .map(|p| lifetimes.input_type(&p.ty, cx))
            .collect();
        let run_params = names
            .iter()
            .zip(&types)
            .map(|(name, ty)| quote!(#name: #ty))
            .collect();
        let (ty, pattern) = match (&types[..], &names[..]) {
            ([ty], [name]) => (quote!(#ty), quote!(#name)),
            _ => (quote!((#(#types,)*)), quote!((#(#names,)*))),
        };
        let marked = params
            .iter()
            .map(|p| &p.ty)
            .chain(&workflow.output_ty)
            .filter(|ty| lifetimes.marks(ty))
            .cloned()
            .collect();
        let params = params
            .iter()
            .map(|p| {
                let (name, ty) = (&p.name, lifetimes.run_type(&p.ty));
                quote!(#name: #ty)
            })
            .collect();
        Input {
            ty,
            lifetime: lifetimes.run,
            pattern,
            params,
            run_params,
            marked,
        }
    }
}

/// The cell where a `Terminate` step puts the run's output.
fn term_cell() -> Ident {
    Ident::new("__flow_term", Span::mixed_site())
}

/// Workflows with at most this many nodes keep node futures inline.
pub(crate) const INLINE_LIMIT: usize = 64;

/// The variable that holds the node at runtime index `p` until the final call.
pub(crate) fn node_ident(p: usize) -> Ident {
    format_ident!("__flow_node_{}", p, span = Span::mixed_site())
}

/// A balanced tree of 2-tuples over `leaves`.
pub(crate) fn balanced(leaves: &[TokenStream]) -> TokenStream {
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
/// and one generic call at the end (`IntoNodes`, in the runtime) bring it to about n^1.3
/// (docs/performance.md, "Compile time").
pub(crate) fn node_statements(names: &Names<'_>, id: usize) -> TokenStream {
    let checked = names.checked;
    let private = &names.private;
    let node = &checked.dag.nodes[id];
    let uses = &checked.uses[id];
    let expr = names.rewrite(&node.expr, uses.iter().map(|u| &u.ident));
    let span = node.expr.span();
    let var = node_ident(names.pos[id]);
    // Unused bindings that let rustc suggest a node for a misspelled name (`validate::Checked`).
    let hints = checked.hints[id].iter().map(
        |hint| quote!(#[allow(unused_variables)] let #hint = ::core::marker::PhantomData::<()>;),
    );
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
                quote!(let #ident = #private::input(#slot)?;)
            }
        },
    );
    match node.kind {
        Kind::Signal => {
            let Some(graph::Waits::Signal { signal, ty, .. }) = &node.waits else {
                return TokenStream::new();
            };
            let text = signal.to_string();
            let mailbox = signals::mailbox_ident();
            let span = ty.span();
            // A durable workflow's step reads its signals from the run's store (when it has
            // one): the payload must be `Durable`, checked on the user's type.
            let wait = match names.workflow.durable {
                Some(_) => quote_spanned!(span=> #private::durable_signal::<#ty>),
                None => quote_spanned!(span=> #private::signal::<#ty>),
            };
            if node.name.is_some() {
                let slot = names.slot(id);
                quote! {
                    let #slot = &#private::Slot::new();
                    let #var = (move || #wait(#mailbox, #text, #private::Option::Some(#slot)),);
                }
            } else {
                quote! {
                    let #var = (move || #wait(#mailbox, #text, #private::Option::None),);
                }
            }
        }
        Kind::Delay => {
            let after = match &node.waits {
                Some(graph::Waits::Delay { ms: Some(ms) }) => {
                    quote!(#private::Duration::from_millis(#ms))
                }
                _ => quote_spanned!(span=> {
                    let __flow_after: #private::Duration = #expr;
                    __flow_after
                }),
            };
            quote! {
                let #var = (
                    #private::Timer,
                    move || -> #private::Result<#private::Duration, #private::NodeError> {
                        #(#inputs)*
                        #(#hints)*
                        #private::Result::Ok(#after)
                    },
                );
            }
        }
        Kind::Operation => {
            let awaited = quote_spanned!(span=> (#expr).await);
            // On the user's tokens, so that an error about the result points at the call.
            let private = respan(private, span);
            let durable = names.workflow.durable.is_some();
            let (slot, finish) = if node.name.is_some() {
                let slot = names.slot(id);
                let finish = if durable {
                    quote_spanned!(span=> #private::complete_durable(#slot, #awaited))
                } else {
                    quote_spanned!(span=> #private::complete(#slot, #awaited))
                };
                (quote!(let #slot = &#private::Slot::new();), finish)
            } else {
                (
                    TokenStream::new(),
                    quote_spanned!(span=> #private::discard(#awaited)),
                )
            };
            // A durable step restored from the journal puts its stored output in its slot and
            // runs none of the user's code.
            let restore = match (durable, node.name.is_some()) {
                (false, _) => TokenStream::new(),
                (true, true) => {
                    let slot = names.slot(id);
                    let display = &node.display;
                    quote! {
                        if let ::core::option::Option::Some(__flow_restored) =
                            #private::restore_output(#slot, #display)
                        {
                            return __flow_restored;
                        }
                    }
                }
                (true, false) => quote! {
                    if #private::restoring() {
                        return #private::Result::Ok(());
                    }
                },
            };
            let future = quote! {
                async move {
                    #restore
                    #(#inputs)*
                    #(#hints)*
                    #finish
                }
            };
            // A step that awaits before it reaches its operation is listened to until the
            // operation's defaults come (`flowdag_runtime::Deferred`).
            let future = if crate::operation::awaits_inside(quote!(#expr)) {
                quote!(#private::Deferred::new(#future))
            } else {
                future
            };
            quote! {
                #slot
                let #var = (move || #future,);
            }
        }
        Kind::Gate => gate_statements(names, id),
        Kind::ForEach | Kind::Loop | Kind::Workflow => crate::nest::node_statements(names, id),
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
                let #var = (#private::Decision, move |#state: &#private::RunState| -> bool {
                    #(#inputs)*
                    #(#hints)*
                    #test
                });
            }
        }
        // An instant node: the scheduler withdraws its target (completes its `ForEach`) when
        // it starts.
        Kind::Cancel | Kind::Complete => quote! {
            let #var = (#private::Decision, move |_: &#private::RunState| -> bool { true });
        },
        // Reads like an operation and puts the run's output in the cell; `false` only if an
        // input is missing, which the scheduler reports as the step's failure.
        Kind::Terminate => {
            let inputs = uses.iter().map(
                |Use {
                     ident,
                     source,
                     optional,
                 }| {
                    let slot = names.slot(*source);
                    if *optional {
                        quote!(let #ident = &#slot.get();)
                    } else {
                        quote!(let #ident = match #slot.get() {
                            ::core::option::Option::Some(__flow_value) => __flow_value,
                            ::core::option::Option::None => return false,
                        };)
                    }
                },
            );
            let output_ty = match &names.workflow.output_ty {
                Some(ty) => quote!(#ty),
                None => quote!(()),
            };
            let cell = term_cell();
            let value =
                quote_spanned!(span=> { let __flow_output: #output_ty = #expr; __flow_output });
            quote! {
                let #var = (#private::Decision, move |_: &#private::RunState| -> bool {
                    #(#inputs)*
                    #(#hints)*
                    #cell.put(#value);
                    true
                });
            }
        }
    }
}

/// The statements of a gate's node: started when the gate fires, it writes the winners to its
/// slot when the block is named (`won = Race {..}`: the winning arm; `got = Parallel(min = k)
/// {..}`: the completed arms in completion order).
fn gate_statements(names: &Names<'_>, id: usize) -> TokenStream {
    let checked = names.checked;
    let private = &names.private;
    let node = &checked.dag.nodes[id];
    let var = node_ident(names.pos[id]);
    let state = Ident::new("__flow_state", Span::mixed_site());
    let Some(name) = &node.name else {
        return quote!(let #var = (#private::Decision, move |_: &#private::RunState| -> bool { true }););
    };
    let index = crate::control::gate_order(checked, &names.pos)
        .iter()
        .position(|&g| checked.dag.gates[g].node == id)
        .unwrap_or_default();
    let race = checked.dag.gates.iter().any(|g| g.node == id && g.race);
    let slot = names.slot(id);
    let (ty, write) = if race {
        (
            quote!(usize),
            quote!(if let ::core::option::Option::Some(&__flow_won) = #state.winners(#index).first() {
                #slot.put(__flow_won);
            }),
        )
    } else {
        (
            quote!(::std::vec::Vec<usize>),
            quote!(#slot.put(#state.winners(#index).to_vec());),
        )
    };
    let slot_decl = quote_spanned!(name.span()=> let #slot = &#private::Slot::<#ty>::new(););
    quote! {
        #slot_decl
        let #var = (#private::Decision, move |#state: &#private::RunState| -> bool {
            #write
            true
        });
    }
}

pub(crate) fn output(names: &Names<'_>) -> TokenStream {
    let checked = names.checked;
    let private = &names.private;
    let Some(expr) = &names.workflow.output else {
        return quote!(#private::Result::Ok(()));
    };
    let inputs = checked.output_uses.iter().map(|(ident, source)| {
        let slot = names.slot(*source);
        if checked.sure[*source] {
            let display = &checked.dag.nodes[*source].display;
            quote!(let #ident = #private::require(#slot, #display)?;)
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
        #private::Result::Ok(#value)
    })
}

pub(crate) fn graph_const(names: &Names<'_>) -> TokenStream {
    let checked = names.checked;
    let private = &names.private;
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
        let label = match checked.nests.iter().find(|n| n.node == id) {
            Some(nest) => crate::nest::label(&nest.step),
            None => graph::source_text(&node.expr),
        };
        let kind = match node.kind {
            Kind::Operation => quote!(#node_kind::Operation),
            Kind::Decision => quote!(#node_kind::Decision),
            Kind::Signal => quote!(#node_kind::Signal),
            Kind::Delay => quote!(#node_kind::Delay),
            Kind::Cancel => quote!(#node_kind::Cancel),
            Kind::Terminate => quote!(#node_kind::Terminate),
            Kind::Gate => quote!(#node_kind::Gate),
            Kind::ForEach => quote!(#node_kind::ForEach),
            Kind::Loop => quote!(#node_kind::Loop),
            Kind::Workflow => quote!(#node_kind::Workflow),
            Kind::Complete => quote!(#node_kind::Cancel),
        };
        let start = node.keyword.span().start();
        let line = start.line as u32;
        let column = start.column as u32 + 1;
        quote! {
            #node_info::__new(#display, #kind, #label, #line, #column)
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
        quote!(#edge_ty::__new(#from, #to, #edge_kind::#kind))
    });

    let plan = plan_tables(checked, &edges, pos);
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
        let policies = checked
            .order
            .iter()
            .map(|&id| dag.nodes[id].policy.tokens(private));
        quote!(&[#(#policies),*])
    };
    let control = crate::control::tables(names).tokens(private);
    // The calls that undo steps, for a durable run's graph fingerprint: none in most graphs.
    let compensations = match checked.compensations.is_empty() {
        true => quote!(),
        false => {
            let mut undo: Vec<(u32, String)> = checked
                .compensations
                .iter()
                .map(|(id, expr, _)| (pos[*id] as u32, graph::source_text(expr)))
                .collect();
            undo.sort_unstable();
            let rows = undo.iter().map(|(node, call)| quote!((#node, #call)));
            quote!(.__with_compensations(&[#(#rows),*]))
        }
    };
    let failure = match names.workflow.fail_fast {
        true => quote!(#private::FailurePolicy::FailFast),
        false => quote!(#private::FailurePolicy::ContinueIndependent),
    };

    quote! {{
        #[allow(unused_imports)]
        use #private::{
            Edge as #edge_ty, EdgeKind as #edge_kind, NodeInfo as #node_info, NodeKind as #node_kind,
        };
        #private::Graph::__new(
            #workflow_name,
            &[#(#nodes),*],
            &[#(#edge_tokens),*],
            #private::Plan::new(
                &[#(#pred_count),*],
                &[#(#succ_start),*],
                &[#(#succ),*],
                &[#(#roots),*],
                &[#(#join_pred_count),*],
                &[#(#join_succ_start),*],
                &[#(#join_succ),*],
                #then_nodes,
                #else_nodes,
                &[#(#group_limits),*],
                #node_groups,
                #policies,
                #failure,
            )#control,
        )#compensations
    }}
}

/// The scheduling tables of a plan (see `flowdag_runtime::Plan`).
struct Tables {
    pred_count: Vec<u32>,
    succ_start: Vec<u32>,
    succ: Vec<u32>,
    join_pred_count: Vec<u32>,
    join_succ_start: Vec<u32>,
    join_succ: Vec<u32>,
}

/// Flag bits of a successor entry, as `flowdag_runtime::Plan` defines them.
const DATA_FLAG: u32 = 1 << 31;
const CAUGHT_FLAG: u32 = 1 << 30;
const JOIN_FLAG: u32 = 1 << 29;
const GATE_FLAG: u32 = 1 << 28;
const SOFT_FLAG: u32 = 1 << 27;

/// Builds the successor lists from `edges` (runtime indices, sorted by source), routing each
/// complete bipartite set of ordering edges through a join.
///
/// A `Sequential` of `Parallel`s makes every exit of one step a predecessor of every entry of
/// the next: `p * s` edges, each a counter decrement at run time. Targets whose ordering
/// predecessors (sequence and `after` edges that a test does not catch) are the same set share
/// one join when that saves entries (`p * s > p + s`): each source lists the join, the join
/// lists the targets. An edge that also carries data keeps a direct data entry beside the join,
/// so a skipped source still skips its reader, and an edge a test catches stays direct.
///
/// An edge from an exit of a gate's arm to the gate's node is the arm's entry (`GATE`), not a
/// predecessor of the node: the gate's node counts one predecessor, its firing. A read of a
/// node its gate may withdraw is `SOFT`.
fn plan_tables(checked: &Checked, edges: &[(usize, usize, u8)], pos: &[usize]) -> Tables {
    let dag = &checked.dag;
    let n = checked.order.len();
    let arm_of_exit = if dag.gates.is_empty() {
        Vec::new()
    } else {
        let by_id = crate::control::arm_of_exit(checked, pos);
        let mut by_pos = vec![None; n];
        for (id, arm) in by_id.into_iter().enumerate() {
            by_pos[pos[id]] = arm;
        }
        by_pos
    };
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
            if why & edge::GATED != 0
                && let Some(arm) = arm_of_exit[from]
            {
                succ.push(arm | GATE_FLAG);
                continue;
            }
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
            // A read that is also the order of a sequence (the steps after a `Pick` reading
            // the last step of an arm) passes the arm's failure on, as after a `Conditional`.
            if why & edge::SOFT_READ != 0 && why & edge::SEQUENCE == 0 {
                entry |= SOFT_FLAG;
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
    for gate in &dag.gates {
        // Its one predecessor: the gate firing.
        pred_count[pos[gate.node]] += 1;
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

/// The workflow type with its interface, but no graph and no body: emitted beside errors so
/// that code using the workflow still type-checks and only the real mistakes are reported. Its
/// run is the runtime's `unreachable_run` (a crate with errors never runs).
fn skeleton(workflow: &Workflow, input: &Input, keys: TokenStream) -> TokenStream {
    let private = private_path(workflow);
    let name = &workflow.name;
    let graph = quote!(#private::Graph::__new(
        ::core::stringify!(#name),
        &[],
        &[],
        #private::Plan::EMPTY,
    ));
    let body = quote!(#private::unreachable_run());
    // Not through the runner: a parameter type may be one `Input` cannot hold.
    let run = quote!(async { #private::unreachable_run().await.result });
    interface(workflow, input, &private, graph, body, run, keys)
}
