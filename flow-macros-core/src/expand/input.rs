//! How the workflow's parameters travel through the generated code.

use std::collections::HashSet;

use proc_macro2::TokenStream;
use quote::quote;
use syn::Ident;

use super::generics::{marks, run_type};
use crate::check::generics::Lifetimes;
use crate::parse::Workflow;

/// How the workflow's parameters travel: as `Workflow::Input<'r>` (`()`, the one parameter's
/// type, or a tuple), bound by a pattern in `__execute`, and built from the parameters of the
/// inherent `run`.
pub struct Input {
    /// `Input<'r>`: each parameter's type with every elided lifetime made `'r`.
    pub ty: TokenStream,
    /// `'r`: the run's borrow (`'a` unless the workflow declares `'a`).
    pub lifetime: syn::Lifetime,
    /// `()`, `name` or `(a, b)`: the pattern `__execute` binds, and the value `run` passes on.
    pub pattern: TokenStream,
    /// `name: Type` of `run`, each parameter once.
    pub params: Vec<TokenStream>,
    /// `name: Type<'r>`: the same, with every elided lifetime made `'r` (as in `ty`).
    pub run_params: Vec<TokenStream>,
    /// The parameter and output types that name a declared lifetime: the type's marker holds
    /// them (`generics::declaration`).
    pub marked: Vec<syn::Type>,
}

impl Input {
    /// Reads the parameters. A parameter type that names a lifetime the workflow does not
    /// declare (`&'b T`) or is an `impl Trait` (reported by `check::header`) is replaced, so
    /// that the types still make a usable skeleton.
    pub fn new(workflow: &Workflow) -> Input {
        let lifetimes = Lifetimes::new(&workflow.generics, &workflow.name);
        // Each parameter once: a duplicate is already reported, and rustc should not repeat it.
        let mut seen = HashSet::new();
        let params: Vec<_> = workflow
            .params
            .iter()
            .filter(|p| seen.insert(p.name.to_string()))
            .collect();
        let names: Vec<&Ident> = params.iter().map(|p| &p.name).collect();
        let types: Vec<syn::Type> = params
            .iter()
            .map(|p| lifetimes.input_type(&p.ty, None))
            .collect();
        let run_params = names
            .iter()
            .zip(&types)
            .map(|(name, ty)| quote!(#name: #ty))
            .collect();
        let (ty, pattern) = match (&types[..], &names[..]) {
            ([ty], [name]) => (quote!(#ty), quote!(#name)),
            _ => (quote!((#(#types,)*)), quote!((#(#names,)*))),
        };
        let marked = params
            .iter()
            .map(|p| &p.ty)
            .chain(&workflow.output_ty)
            .filter(|ty| marks(&lifetimes, ty))
            .cloned()
            .collect();
        let params = params
            .iter()
            .map(|p| {
                let (name, ty) = (&p.name, run_type(&lifetimes, &p.ty));
                quote!(#name: #ty)
            })
            .collect();
        Input {
            ty,
            lifetime: lifetimes.run,
            pattern,
            params,
            run_params,
            marked,
        }
    }
}
