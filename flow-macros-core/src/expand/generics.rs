//! The workflow's type over its generics, and the parameter types of its inherent `run`.
//!
//! The workflow's type carries its parameters in a `PhantomData<fn() -> (..)>`, so it is `Send`
//! and `Sync` whatever they are. That marker also holds every parameter type and the output type
//! that name a declared lifetime (`&'a T`): rustc infers the struct's outlives requirements
//! (`T: 'a`) from them, and the impls get them as implied bounds, as a `fn` gets them from its
//! signature.

use std::collections::HashSet;

use proc_macro2::{Span, TokenStream};
use quote::quote;
use syn::visit::{self, Visit};
use syn::visit_mut::VisitMut;
use syn::{GenericParam, Lifetime, Type};

use crate::check::generics::Lifetimes;
use crate::parse::Workflow;

/// `ty` as a parameter of the inherent `run`: undeclared named lifetimes (already reported)
/// made `'_`, so the skeleton does not add "undeclared lifetime" errors.
pub fn run_type(lifetimes: &Lifetimes, ty: &Type) -> Type {
    let mut ty = ty.clone();
    Named {
        declared: &lifetimes.declared,
        to: Lifetime::new("'_", Span::call_site()),
    }
    .visit_type_mut(&mut ty);
    ty
}

/// Whether `ty` goes into the type's marker: it names a declared lifetime or `'static`, and
/// nothing elided or undeclared (which a struct field cannot hold, and which is reported
/// elsewhere).
pub fn marks(lifetimes: &Lifetimes, ty: &Type) -> bool {
    let mut seen = Seen::default();
    seen.visit_type(ty);
    let declared = seen
        .named
        .iter()
        .all(|name| lifetimes.declared.contains(name));
    seen.named_any && declared && !seen.elided && !seen.impl_trait
}

/// The declaration of the workflow's type: a unit struct for a workflow without generics, else
/// a struct over its generics whose one field is a marker (see the module's documentation).
pub fn declaration(workflow: &Workflow, marked: &[&Type]) -> TokenStream {
    let vis = &workflow.vis;
    let name = &workflow.name;
    let generics = &workflow.generics;
    if generics.params.is_empty() && generics.where_clause.is_none() {
        return quote!(#vis struct #name;);
    }
    let phantom = quote!(::core::marker::PhantomData);
    let params = generics.params.iter().filter_map(|param| match param {
        GenericParam::Lifetime(param) => {
            let lifetime = &param.lifetime;
            Some(quote!(&#lifetime ()))
        }
        GenericParam::Type(param) => {
            let ident = &param.ident;
            Some(quote!(#phantom<#ident>))
        }
        // A const parameter needs no use.
        GenericParam::Const(_) => None,
    });
    let marked = marked.iter().map(|ty| quote!(#phantom<#ty>));
    let where_clause = &generics.where_clause;
    quote! {
        #vis struct #name #generics (#phantom<fn() -> (#(#params,)* #(#marked,)*)>) #where_clause;
    }
}

/// Replaces the named lifetimes that are neither declared nor `'static` with `to`.
struct Named<'d> {
    declared: &'d HashSet<String>,
    to: Lifetime,
}

impl VisitMut for Named<'_> {
    fn visit_lifetime_mut(&mut self, lifetime: &mut Lifetime) {
        let ident = lifetime.ident.to_string();
        if ident != "static" && ident != "_" && !self.declared.contains(&ident) {
            *lifetime = self.to.clone();
        }
    }
    fn visit_type_fn_ptr_mut(&mut self, _: &mut syn::TypeFnPtr) {}
    fn visit_bound_lifetimes_mut(&mut self, _: &mut syn::BoundLifetimes) {}
}

/// The lifetimes a type names, outside the types that bind their own.
#[derive(Default)]
struct Seen {
    /// Named lifetimes other than `'static`.
    named: Vec<String>,
    /// Whether it names any lifetime, `'static` included.
    named_any: bool,
    elided: bool,
    impl_trait: bool,
}

impl<'ast> Visit<'ast> for Seen {
    fn visit_type_reference(&mut self, reference: &'ast syn::TypeReference) {
        if reference.lifetime.is_none() {
            self.elided = true;
        }
        visit::visit_type_reference(self, reference);
    }

    fn visit_lifetime(&mut self, lifetime: &'ast Lifetime) {
        match lifetime.ident.to_string().as_str() {
            "_" => self.elided = true,
            "static" => self.named_any = true,
            name => {
                self.named_any = true;
                self.named.push(name.to_string());
            }
        }
    }

    fn visit_type_impl_trait(&mut self, _: &'ast syn::TypeImplTrait) {
        self.impl_trait = true;
    }

    fn visit_type_fn_ptr(&mut self, _: &'ast syn::TypeFnPtr) {}
    fn visit_parenthesized_generic_arguments(
        &mut self,
        _: &'ast syn::ParenthesizedGenericArguments,
    ) {
    }
    fn visit_trait_bound(&mut self, bound: &'ast syn::TraitBound) {
        if bound.lifetimes.is_none() {
            visit::visit_trait_bound(self, bound);
        }
    }
}
