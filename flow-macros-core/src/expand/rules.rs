//! The trigger-rule and critical-section tables of a workflow's `Control`.

use proc_macro2::TokenStream;
use quote::quote;

use crate::check::Checked;
use crate::parse::rules::Rule;

/// The rows of the trigger-rule and critical-section tables of `Control`.
#[derive(Default)]
pub struct Rows {
    /// One `Rule::..` per node, or none.
    pub rules: Vec<TokenStream>,
    /// `Section { .. }` rows.
    pub sections: Vec<TokenStream>,
    /// Per node, the sections it belongs to; or none.
    pub node_sections: Vec<Vec<u32>>,
}

/// The trigger-rule and critical-section tables; each section's nodes go to `scopes`.
/// `pos[id]` is node `id`'s runtime index.
pub fn tables(
    checked: &Checked,
    pos: &[usize],
    private: &TokenStream,
    scopes: &mut Vec<Vec<u32>>,
) -> Rows {
    let mut out = Rows::default();
    let dag = &checked.dag;
    if dag.nodes.iter().any(|n| n.rule != Rule::Default) {
        out.rules = checked
            .order
            .iter()
            .map(|&id| match dag.nodes[id].rule {
                Rule::Default => quote!(#private::Rule::Default),
                Rule::AllDone => quote!(#private::Rule::AllDone),
                Rule::OneFailed => quote!(#private::Rule::OneFailed),
            })
            .collect();
    }
    if dag.sections.is_empty() {
        return out;
    }
    let mut groups: Vec<String> = Vec::new();
    let mut node_sections: Vec<Vec<u32>> = vec![Vec::new(); pos.len()];
    for (index, section) in dag.sections.iter().enumerate() {
        let name = section.group.value();
        let group = match groups.iter().position(|g| *g == name) {
            Some(g) => g,
            None => {
                groups.push(name);
                groups.len() - 1
            }
        } as u32;
        let mut members: Vec<u32> = section.nodes.iter().map(|&id| pos[id] as u32).collect();
        members.sort_unstable();
        for &member in &members {
            node_sections[member as usize].push(index as u32);
        }
        let scope = scopes.len() as u32;
        scopes.push(members);
        let name = section.group.value();
        out.sections.push(quote!(#private::Section {
            group: #group,
            name: #name,
            scope: #scope
        }));
    }
    out.node_sections = node_sections;
    out
}
