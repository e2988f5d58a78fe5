//! The header's checks: the output type names only the lifetimes it may, the body has an
//! output exactly when the header declares an output type, and the parameter types name only
//! declared lifetimes and no `impl Trait`.

use std::collections::HashSet;

use syn::spanned::Spanned;

use super::generics::Lifetimes;
use crate::ctxt::Ctxt;
use crate::parse::Workflow;

/// Checks the header of `workflow`. An output type that names a lifetime it may not is made
/// `'static` there, so that the skeleton written beside the errors adds none of its own.
pub fn check(workflow: &mut Workflow, cx: &mut Ctxt) {
    let lifetimes = Lifetimes::new(&workflow.generics, &workflow.name);
    if let Some(ty) = &mut workflow.output_ty {
        lifetimes.output_type(ty, cx);
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
    // Each parameter once: a duplicate is reported with the graph's checks.
    let mut seen = HashSet::new();
    for param in workflow
        .params
        .iter()
        .filter(|p| seen.insert(p.name.to_string()))
    {
        lifetimes.input_type(&param.ty, Some(cx));
    }
}
