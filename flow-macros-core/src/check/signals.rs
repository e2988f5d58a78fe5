//! The signals a workflow declares: one payload type and one `transient` per name, and keys
//! that do not clash.

use std::collections::BTreeMap;

use quote::ToTokens;
use syn::spanned::Spanned;
use syn::{Ident, Type};

use crate::ctxt::Ctxt;
use crate::graph::{Dag, Waits};
use crate::suggest::at_line;

/// The key constant's name of signal `name`: upper-cased, without a raw prefix.
pub fn key_name(name: &Ident) -> String {
    let text = name.to_string();
    text.strip_prefix("r#").unwrap_or(&text).to_uppercase()
}

/// The signals of a workflow, each once: (name, payload type, transient), in source order.
/// Reports two declarations of one signal that disagree, and names whose keys clash or are no
/// identifier (which are left out, so that their constants do not add errors of their own).
pub fn declared<'a>(dag: &'a Dag, cx: &mut Ctxt) -> Vec<(&'a Ident, &'a Type, bool)> {
    let mut first: BTreeMap<String, (&Ident, &Type, bool)> = BTreeMap::new();
    let mut out: Vec<(&Ident, &Type, bool)> = Vec::new();
    for node in &dag.nodes {
        let Some(Waits::Signal {
            signal,
            ty,
            transient,
        }) = &node.waits
        else {
            continue;
        };
        let text = signal.to_string();
        if let Some(&(earlier, earlier_ty, earlier_transient)) = first.get(&text) {
            let (was, is) = (type_text(earlier_ty), type_text(ty));
            if was != is {
                cx.error(
                    ty.span(),
                    format!(
                        "the signal `{signal}` carries `{was}`{}, and here `{is}`: a signal has one payload type; give it the same type at every step, or use another name",
                        at_line(earlier.span())
                    ),
                );
            } else if earlier_transient != *transient {
                let (there, here) = match transient {
                    true => ("kept", "transient"),
                    false => ("transient", "kept"),
                };
                cx.error(
                    signal.span(),
                    format!(
                        "the signal `{signal}` is {there}{} and {here} here: declare it the same way at every step (`transient` or not)",
                        at_line(earlier.span())
                    ),
                );
            }
            continue;
        }
        first.insert(text, (signal, &**ty, *transient));
        let key = key_name(signal);
        if key == "GRAPH" {
            cx.error(
                signal.span(),
                format!("a signal cannot be called `{signal}`: its key would be `GRAPH`, the workflow's graph; rename the signal"),
            );
        } else if syn::parse_str::<Ident>(&key).is_err() {
            // Upper-casing an identifier gives an identifier for every character of today's
            // Unicode; a future letter that did not would otherwise make `Ident::new` panic.
            cx.error(
                signal.span(),
                format!("the signal `{signal}` has no key constant: `{key}`, its name upper-cased, is no Rust identifier; rename the signal"),
            );
        } else if let Some((other, ..)) = out.iter().find(|(other, ..)| key_name(other) == key) {
            cx.error(
                signal.span(),
                format!(
                    "the signals `{other}`{} and `{signal}` would both have the key `{key}`; rename one of them",
                    at_line(other.span())
                ),
            );
        } else {
            out.push((signal, &**ty, *transient));
        }
    }
    out
}

fn type_text(ty: &Type) -> String {
    ty.to_token_stream().to_string().replace(' ', "")
}
