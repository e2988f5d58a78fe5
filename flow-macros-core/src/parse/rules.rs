//! Trigger rules (`when = all_done | one_failed` on an `Operation`) and critical sections
//! (`exclusive = "group"` on an `Operation`, `Sequential` or `Parallel`): their options.

use syn::{Expr, LitStr};

use super::ast::{Opt, OptValue};
use crate::ctxt::Ctxt;
use crate::suggest::did_you_mean;

/// When a node runs, given how its inputs ended.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum Rule {
    /// When every input completed or was skipped; aborted when a failure reaches it.
    #[default]
    Default,
    /// When every input has settled, whatever its status.
    AllDone,
    /// When every input has settled and some input failed or was aborted; skipped otherwise.
    OneFailed,
}

/// The values `when` takes.
const RULES: [(&str, Rule); 2] = [("all_done", Rule::AllDone), ("one_failed", Rule::OneFailed)];

/// Reads `when = all_done | one_failed` on an `Operation`.
pub fn when(opt: &Opt, cx: &mut Ctxt) -> Rule {
    const EXPECTED: &str = "`when` takes `all_done` (run whatever the inputs' fate) or `one_failed` (run only if an input failed)";
    let name = match &opt.value {
        OptValue::Other(expr) => match &**expr {
            Expr::Path(path) => path.path.get_ident().map(ToString::to_string),
            _ => None,
        },
        _ => None,
    };
    let Some(name) = name else {
        cx.error(opt.value.span(), EXPECTED);
        return Rule::Default;
    };
    if let Some((_, rule)) = RULES.iter().find(|(n, _)| *n == name) {
        return *rule;
    }
    let hint = did_you_mean(&name, RULES.iter().map(|(n, _)| *n));
    let message = if hint.is_empty() {
        format!("unknown trigger rule `{name}`: {EXPECTED}")
    } else {
        format!("unknown trigger rule `{name}`{hint}")
    };
    cx.error(opt.value.span(), message);
    Rule::Default
}

/// Reads `exclusive = "group"` on an `Operation`, `Sequential` or `Parallel`.
pub fn exclusive(opt: &Opt, cx: &mut Ctxt) -> Option<LitStr> {
    match &opt.value {
        OptValue::Str(lit) if lit.value().trim().is_empty() => {
            cx.error(
                lit.span(),
                "`exclusive` needs a group name, as in `exclusive = \"ledger\"`: sections of the same group never run at the same time",
            );
            None
        }
        OptValue::Str(lit) => Some(lit.clone()),
        other => {
            cx.error(
                other.span(),
                "`exclusive` takes a group name in quotes, as in `exclusive = \"ledger\"`",
            );
            None
        }
    }
}

/// The error for `when` on a block: it is an option of an `Operation` only.
pub fn when_on_block(opt: &Opt, block: &str, cx: &mut Ctxt) {
    cx.error(
        opt.key.span(),
        format!(
            "`when` is an option of an `Operation`, not of `{block}`: put it on the step that should run when its inputs have ended, as in `Operation(cleanup(), when = all_done)`"
        ),
    );
}
