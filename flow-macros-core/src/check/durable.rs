//! What a `#[flow(durable)]` workflow cannot declare: a lifetime, a borrowed parameter.

use syn::spanned::Spanned;

use crate::ctxt::Ctxt;
use crate::parse::Workflow;

/// What a durable workflow cannot declare, since its parameters are stored with the run (a
/// lifetime, a borrowed parameter): errors on the user's tokens.
pub fn check(workflow: &Workflow, cx: &mut Ctxt) {
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
}
