//! The workflow's `GRAPH` constant: its nodes, its edges and its plan, with the control tables
//! when it has any.

use proc_macro2::{Span, TokenStream};
use quote::quote;
use syn::Ident;

use super::control;
use super::labels::{nest_label, source_text};
use super::names::Names;
use super::plan::{Tables, plan_tables};
use super::policy;
use crate::graph::{self, Kind, edge};

/// The `Graph` constant of a checked workflow (or nest body).
pub fn graph_const(names: &Names<'_>) -> TokenStream {
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
        let label = match (checked.nests.iter().find(|n| n.node == id), &node.patch) {
            (Some(nest), _) => nest_label(&nest.step),
            (None, Some(patch)) => format!("Patched(\"{}\")", patch.value()),
            (None, None) => source_text(&node.expr),
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
            .map(|&id| policy::tokens(&dag.nodes[id].policy, private));
        quote!(&[#(#policies),*])
    };
    let control = control::tables(names).tokens(private);
    // The calls that undo steps, for a durable run's graph fingerprint: none in most graphs.
    let compensations = match checked.compensations.is_empty() {
        true => quote!(),
        false => {
            let mut undo: Vec<(u32, String)> = checked
                .compensations
                .iter()
                .map(|(id, expr, _)| (pos[*id] as u32, source_text(expr)))
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
