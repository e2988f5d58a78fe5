//! The control tables of a workflow (`flowdag_runtime::Control`): races and joins of k of n,
//! trigger rules, cancel scopes, `Terminate`, critical sections and signals.
//!
//! A workflow that uses none of them gets no table at all, so its generated code is the same
//! as without this module, and the runtime pays nothing for it. Each construct fills its own
//! table in [`tables`], in runtime node ids (positions in execution order).

use proc_macro2::TokenStream;
use quote::quote;

use super::gates::gate_order;
use super::names::Names;
use super::nest;
use super::rules;
use super::signals;
use crate::check::Checked;
use crate::graph::Kind;

/// The rows of a workflow's `Control`, ready to emit. A table that stays empty is emitted as
/// `&[]`.
#[derive(Default)]
pub struct ControlTables {
    /// Lists of runtime node ids withdrawn or held together, each sorted.
    pub scopes: Vec<Vec<u32>>,
    /// `Gate::new(..)` rows.
    pub gates: Vec<TokenStream>,
    /// `Arm { .. }` rows.
    pub arms: Vec<TokenStream>,
    /// One `Rule::..` per node, or none.
    pub rules: Vec<TokenStream>,
    /// One `Instant::..` per node, or none.
    pub instants: Vec<TokenStream>,
    /// `Section { .. }` rows.
    pub sections: Vec<TokenStream>,
    /// Per node, the sections it belongs to; or none.
    pub node_sections: Vec<Vec<u32>>,
    /// `SignalInfo { .. }` rows.
    pub signals: Vec<TokenStream>,
    /// `NestInfo { .. }` rows, in node order.
    pub nests: Vec<TokenStream>,
}

impl ControlTables {
    fn is_empty(&self) -> bool {
        self.scopes.is_empty()
            && self.gates.is_empty()
            && self.arms.is_empty()
            && self.rules.is_empty()
            && self.instants.is_empty()
            && self.sections.is_empty()
            && self.node_sections.is_empty()
            && self.signals.is_empty()
            && self.nests.is_empty()
    }

    /// `.with_control(&Control::new(..))` to append to the `Plan::new(..)` call, or nothing
    /// for a workflow without control tables.
    pub fn tokens(&self, private: &TokenStream) -> TokenStream {
        if self.is_empty() {
            return TokenStream::new();
        }
        let ControlTables {
            scopes,
            gates,
            arms,
            rules,
            instants,
            sections,
            node_sections,
            signals,
            nests,
        } = self;
        let scopes = scopes.iter().map(|s| quote!(&[#(#s),*]));
        let node_sections = node_sections.iter().map(|s| quote!(&[#(#s),*]));
        let nests = match nests.is_empty() {
            true => TokenStream::new(),
            false => quote!(.with_nests(&[#(#nests),*])),
        };
        quote! {
            .with_control(&#private::Control::new(
                &[#(#scopes),*],
                &[#(#gates),*],
                &[#(#arms),*],
                &[#(#rules),*],
                &[#(#instants),*],
                &[#(#sections),*],
                &[#(#node_sections),*],
                &[#(#signals),*],
            )#nests)
        }
    }
}

/// The control tables of a checked workflow. `pos[id]` is node `id`'s runtime index; `names`
/// is the workflow's, for the graphs of nest bodies.
pub fn tables(names: &Names<'_>) -> ControlTables {
    let (checked, pos, private) = (names.checked, &names.pos[..], &names.private);
    let mut tables = ControlTables {
        nests: nest::table(names),
        ..ControlTables::default()
    };
    tables.signals = signals::table(checked, pos, private);
    gate_tables(checked, pos, private, &mut tables);
    instants(checked, pos, private, &mut tables);
    let rows = rules::tables(checked, pos, private, &mut tables.scopes);
    tables.rules = rows.rules;
    tables.sections = rows.sections;
    tables.node_sections = rows.node_sections;
    tables
}

/// `Cancel` and `Terminate` steps: one `Instant` per node (none when the workflow has
/// neither), and a scope per `Cancel` with the nodes it withdraws.
fn instants(checked: &Checked, pos: &[usize], private: &TokenStream, tables: &mut ControlTables) {
    let dag = &checked.dag;
    let any = checked.order.iter().any(|&id| {
        matches!(
            dag.nodes[id].kind,
            Kind::Cancel | Kind::Terminate | Kind::Complete
        )
    });
    if !any {
        return;
    }
    tables.instants = checked
        .order
        .iter()
        .map(|&id| match dag.nodes[id].kind {
            Kind::Cancel => {
                let scope = checked
                    .cancels
                    .iter()
                    .find(|(cancel, _)| *cancel == id)
                    .map(|(_, scope)| {
                        let mut nodes: Vec<u32> = scope.iter().map(|&m| pos[m] as u32).collect();
                        nodes.sort_unstable();
                        nodes
                    })
                    .unwrap_or_default();
                let index = tables.scopes.len() as u32;
                tables.scopes.push(scope);
                quote!(#private::Instant::Cancel { scope: #index })
            }
            Kind::Terminate => quote!(#private::Instant::Terminate),
            Kind::Complete => {
                let node = complete_target(checked, id).map_or(0, |t| pos[t] as u32);
                quote!(#private::Instant::Complete { node: #node })
            }
            _ => quote!(#private::Instant::None),
        })
        .collect();
}

/// `Control::gates`, `Control::arms`, and one scope per arm (its nodes, withdrawn together).
fn gate_tables(
    checked: &Checked,
    pos: &[usize],
    private: &TokenStream,
    tables: &mut ControlTables,
) {
    let mut first_arm = 0u32;
    for (index, g) in gate_order(checked, pos).into_iter().enumerate() {
        let gate = &checked.dag.gates[g];
        let node = pos[gate.node] as u32;
        let min = gate.min;
        let arms = gate.arms.len() as u32;
        let rest = if gate.rest_cancel {
            quote!(#private::Rest::Cancel)
        } else {
            quote!(#private::Rest::Run)
        };
        tables.gates.push(quote!(#private::Gate {
            node: #node, min: #min, rest: #rest, first_arm: #first_arm, arms: #arms,
        }));
        for arm in &gate.arms {
            let mut nodes: Vec<u32> = arm.nodes.iter().map(|&n| pos[n] as u32).collect();
            nodes.sort_unstable();
            let scope = tables.scopes.len() as u32;
            tables.scopes.push(nodes);
            let exits = arm.exits.len() as u32;
            let index = index as u32;
            tables
                .arms
                .push(quote!(#private::Arm { gate: #index, exits: #exits, scope: #scope }));
        }
        first_arm += arms;
    }
}

/// The `ForEach` node a `Complete` node names.
pub fn complete_target(checked: &Checked, complete: usize) -> Option<usize> {
    let dag = &checked.dag;
    let (_, target) = dag.completes.iter().find(|(c, _)| *c == complete)?;
    dag.nodes
        .iter()
        .position(|n| n.name.as_ref() == Some(target))
}
