//! What the code `#[flow(durable)]` generates calls, re-exported by `__private` only: each
//! step's future restores its stored output first ([`restore_output`], [`restoring`]) and hands
//! its output to the journal ([`complete_durable`]); [`assert_durable`] checks at compile time
//! that a parameter or output type can be stored.

use serde::de::DeserializeOwned;

use super::{CURRENT, Durable};
use crate::error::{IntoNodeResult, NodeError};
use crate::slot::Slot;

/// The first thing a durable node's future does: when the scheduler restores the node from
/// the journal, puts the stored output in `slot` and returns the node's result; `None` when the
/// node runs for real. Called by generated code.
pub fn restore_output<T: DeserializeOwned>(
    slot: &Slot<T>,
    node: &'static str,
) -> Option<Result<(), NodeError>> {
    let bytes = take_restore()?;
    Some(match serde_json::from_slice::<T>(&bytes) {
        Ok(value) => {
            slot.put(value);
            Ok(())
        }
        Err(error) => Err(NodeError::Failed(
            format!(
                "the stored output of `{node}` cannot be read as `{}`: {error}",
                std::any::type_name::<T>()
            )
            .into(),
        )),
    })
}

/// As [`restore_output`] for a node without output: whether it is restored (and must not run).
pub fn restoring() -> bool {
    take_restore().is_some()
}

/// The stored output the scheduler hands the attempt being polled to restore, taken.
pub(crate) fn take_restore() -> Option<Vec<u8>> {
    CURRENT.with(|c| c.borrow_mut().as_mut().and_then(|ctx| ctx.restore.take()))
}

/// Hands an output's JSON to the scheduler, which journals it with the node's completion
/// (inside a durable run's attempt; nothing elsewhere). `type_name` tells a mismatch apart
/// from corruption when it is read back.
pub(crate) fn capture<T: serde::Serialize>(
    value: &T,
    type_name: &'static str,
) -> Result<(), NodeError> {
    if CURRENT.with(|c| c.borrow().is_none()) {
        return Ok(());
    }
    let bytes = serde_json::to_vec(value).map_err(|error| {
        NodeError::Failed(format!("the output cannot be stored: {error}").into())
    })?;
    CURRENT.with(|c| {
        if let Some(ctx) = c.borrow_mut().as_mut() {
            ctx.captured = Some((type_name, bytes));
        }
    });
    Ok(())
}

/// Stores a durable operation's result in its slot and hands its JSON to the scheduler, which
/// journals it with the node's completion. Called by generated code, spanned on the user's
/// call, so that an output that cannot be stored is an error on it.
pub fn complete_durable<R>(slot: &Slot<R::Ok>, result: R) -> Result<(), NodeError>
where
    R: IntoNodeResult,
    R::Ok: Durable,
{
    let value = result.into_node_result()?;
    capture(&value, std::any::type_name::<R::Ok>())?;
    slot.put(value);
    Ok(())
}

/// A compile-time check that a value can be stored: generated code calls it on each
/// parameter type and the output type of a durable workflow, spanned on the type.
pub fn assert_durable<T: Durable>() {}

/// The name of a generic durable workflow's runs: `base<arg, ..>`
/// ([`DurableWorkflow::durable_name`](super::DurableWorkflow::durable_name)). Called by
/// generated code.
pub fn generic_name(base: &str, args: &[String]) -> std::borrow::Cow<'static, str> {
    std::borrow::Cow::Owned(format!("{base}<{}>", args.join(", ")))
}

/// A type argument of a generic durable workflow as its runs' name writes it: its type name
/// without module paths (`Vec<Email>` for `alloc::vec::Vec<my_app::Email>`). Called by
/// generated code.
pub fn type_argument<T: ?Sized>() -> String {
    short_type_name(std::any::type_name::<T>())
}

/// `full` (a type's name) with every path cut to its last segment.
fn short_type_name(full: &str) -> String {
    let mut out = String::with_capacity(full.len());
    let mut segment = String::new();
    let mut chars = full.chars().peekable();
    while let Some(c) = chars.next() {
        if c == ':' && chars.peek() == Some(&':') {
            chars.next();
            segment.clear();
        } else if c.is_alphanumeric() || c == '_' {
            segment.push(c);
        } else {
            out.push_str(&segment);
            segment.clear();
            out.push(c);
        }
    }
    out.push_str(&segment);
    out
}

#[cfg(test)]
mod tests {
    use super::short_type_name;

    #[test]
    fn type_names_lose_their_module_paths() {
        assert_eq!(short_type_name("u32"), "u32");
        assert_eq!(short_type_name("alloc::string::String"), "String");
        assert_eq!(
            short_type_name("alloc::vec::Vec<my_app::jobs::Email>"),
            "Vec<Email>"
        );
        assert_eq!(
            short_type_name("(u8, core::option::Option<alloc::string::String>)"),
            "(u8, Option<String>)"
        );
        assert_eq!(short_type_name("[u8; 4]"), "[u8; 4]");
    }
}
