//! What `#[flow(durable)]` does not support yet, and parameters that cannot be stored.

use syn::spanned::Spanned;

use super::Checked;
use crate::ctxt::Ctxt;
use crate::graph::Kind;
use crate::parse::Workflow;

/// What `#[flow(durable)]` does not support yet, and parameters that cannot be stored (a
/// borrowed one): errors on the user's tokens.
pub fn check(workflow: &Workflow, checked: &Checked, cx: &mut Ctxt) {
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
