//! What `#[flow(durable)]` does not support yet, and parameters that cannot be stored.

use syn::spanned::Spanned;

use super::Checked;
use crate::ctxt::Ctxt;
use crate::parse::{What, Workflow};

/// What `#[flow(durable)]` does not support yet, and parameters that cannot be stored (a
/// borrowed one): errors on the user's tokens.
pub fn check(workflow: &Workflow, checked: &Checked, cx: &mut Ctxt) {
    if let Some(param) = workflow.generics.lifetimes().next() {
        cx.error(
            param.span(),
            "a durable workflow cannot declare a lifetime: its parameters are stored with the run and must be owned values",
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
    for nest in &checked.nests {
        if let What::ForEach(each) = &nest.step.what
            && each.min.is_some()
            && !each.rest_cancel
        {
            cx.error(
                checked.dag.nodes[nest.node].keyword.span(),
                "a durable `ForEach` cannot let its other instances run on after `min` (`rest = run`) yet: they would run without keys and their ends would not be journaled; use `rest = cancel` (the default)",
            );
        }
    }
}
