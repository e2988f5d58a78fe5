//! The trigger-rule and critical-section tables of a workflow's `Control`.

use proc_macro2::TokenStream;
use quote::quote;

use super::control::ControlTables;
use crate::check::Checked;
use crate::parse::rules::Rule;

/// Fills the trigger-rule and critical-section tables. `pos[id]` is node `id`'s runtime
/// index.
pub fn tables(checked: &Checked, pos: &[usize], private: &TokenStream, out: &mut ControlTables) {
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
        return;
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
        let scope = out.scopes.len() as u32;
        out.scopes.push(members);
        out.sections
            .push(quote!(#private::Section { group: #group, scope: #scope }));
    }
    out.node_sections = node_sections;
}
