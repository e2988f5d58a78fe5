//! Generics and lifetimes of the workflow's header: `W<'a, T: Clone>(a: &'a A, b: &B) -> &'a T`,
//! and the checks of the lifetimes its parameter and output types name.
//!
//! Two kinds of lifetime meet in a parameter type:
//! - an *elided* one (`&B`, `'_`) is the run's borrow: `Workflow::Input<'r>`'s own lifetime,
//!   fresh for each run;
//! - a *declared* one (`'a` of `W<'a>`) is a parameter of the workflow's type, like its type
//!   parameters: `impl<'a, T: Clone> Workflow for W<'a, T>`. The output type, which is not
//!   generic over the run's borrow, may name it.
//!
//! The workflow's type carries its parameters in a `PhantomData<fn() -> (..)>`, so it is `Send`
//! and `Sync` whatever they are. That marker also holds every parameter type and the output type
//! that name a declared lifetime (`&'a T`): rustc infers the struct's outlives requirements
//! (`T: 'a`) from them, and the impls get them as implied bounds, as a `fn` gets them from its
//! signature.

use std::collections::HashSet;

use proc_macro2::Span;
use syn::visit_mut::{self, VisitMut};
use syn::{Lifetime, Type};

use crate::ctxt::Ctxt;

/// The lifetimes a parameter type may name, and the run's own.
pub struct Lifetimes {
    /// The lifetimes declared after the workflow's name.
    pub declared: HashSet<String>,
    /// The lifetime of `Input<'r>`: `'a` when the workflow declares no lifetime, else `'run`
    /// (or `'__flow_run` when it declares `'run`).
    pub run: Lifetime,
    /// How the messages show the declaration of a lifetime `'x`: `Name<'x>(..)`, or
    /// `Name<'x, ..>(..)` when the workflow has generics.
    name: String,
    generic: bool,
}

impl Lifetimes {
    /// The lifetimes of a header with `generics`, for the workflow `name`.
    pub fn new(generics: &syn::Generics, name: &syn::Ident) -> Lifetimes {
        let declared: HashSet<String> = generics
            .lifetimes()
            .map(|param| param.lifetime.ident.to_string())
            .collect();
        let run = if declared.is_empty() {
            "'a"
        } else if !declared.contains("run") {
            "'run"
        } else {
            "'__flow_run"
        };
        Lifetimes {
            declared,
            run: Lifetime::new(run, Span::call_site()),
            name: name.to_string(),
            generic: !generics.params.is_empty(),
        }
    }

    /// `Name<'x>(..)`: where the lifetime `'x` is declared.
    fn declare(&self, lifetime: &Lifetime) -> String {
        let (name, more) = (&self.name, if self.generic { ", .." } else { "" });
        format!("`{name}<{lifetime}{more}>(..)`")
    }

    /// Checks the output type: it cannot borrow for the run (an elided lifetime) nor name a
    /// lifetime the workflow does not declare. Each such lifetime is reported in `cx` and made
    /// `'static`, for the skeleton.
    pub fn output_type(&self, ty: &mut Type, cx: &mut Ctxt) {
        Output {
            lifetimes: self,
            cx,
        }
        .visit_type_mut(ty);
    }

    /// `ty` as a part of `Input<'r>`: every elided lifetime (`&T`, `'_`) made the run's. A
    /// named lifetime that the workflow does not declare, or an `impl Trait`, is replaced (for
    /// the skeleton), and reported in `cx` if given.
    pub fn input_type(&self, ty: &Type, cx: Option<&mut Ctxt>) -> Type {
        let mut ty = ty.clone();
        let mut visitor = Elided {
            lifetimes: self,
            to: self.run.clone(),
            cx,
        };
        visitor.visit_type_mut(&mut ty);
        ty
    }
}

/// Replaces elided lifetimes with `to`; reports undeclared named ones and `impl Trait`.
struct Elided<'l, 'c> {
    lifetimes: &'l Lifetimes,
    to: Lifetime,
    cx: Option<&'c mut Ctxt>,
}

impl VisitMut for Elided<'_, '_> {
    fn visit_type_reference_mut(&mut self, reference: &mut syn::TypeReference) {
        match &mut reference.lifetime {
            Some(lifetime) => self.visit_lifetime_mut(lifetime),
            None => reference.lifetime = Some(self.to.clone()),
        }
        self.visit_type_mut(&mut reference.elem);
    }

    fn visit_lifetime_mut(&mut self, lifetime: &mut Lifetime) {
        let ident = lifetime.ident.to_string();
        if ident == "static" || self.lifetimes.declared.contains(&ident) {
            return;
        }
        if ident != "_"
            && let Some(cx) = self.cx.as_deref_mut()
        {
            let declare = self.lifetimes.declare(lifetime);
            cx.error(
                lifetime.span(),
                format!(
                    "undeclared lifetime `{lifetime}` in a workflow parameter; declare it after the workflow's name, as in {declare}, or write `&T` or `'_` to borrow for as long as the run runs"
                ),
            );
        }
        *lifetime = self.to.clone();
    }

    fn visit_type_mut(&mut self, ty: &mut Type) {
        let Type::ImplTrait(impl_trait) = ty else {
            return visit_mut::visit_type_mut(self, ty);
        };
        if let Some(cx) = self.cx.as_deref_mut() {
            cx.error(
                impl_trait.impl_token.span,
                "a workflow parameter cannot be an `impl Trait`; name a concrete type, a `&dyn Trait`, a `Box<dyn Trait>` or a type parameter of the workflow",
            );
        }
        // For the skeleton: a type that `Input` can hold.
        *ty = Type::Tuple(syn::TypeTuple {
            attrs: Vec::new(),
            paren_token: Default::default(),
            elems: syn::punctuated::Punctuated::new(),
        });
    }

    // `fn(&T)` and `for<'b> Fn(&'b T)` bind lifetimes of their own: left as written.
    fn visit_type_fn_ptr_mut(&mut self, _: &mut syn::TypeFnPtr) {}
    fn visit_parenthesized_generic_arguments_mut(
        &mut self,
        _: &mut syn::ParenthesizedGenericArguments,
    ) {
    }
    fn visit_trait_bound_mut(&mut self, bound: &mut syn::TraitBound) {
        if bound.lifetimes.is_none() {
            visit_mut::visit_trait_bound_mut(self, bound);
        }
    }
}

/// Reports the elided and undeclared lifetimes of the output type, and makes them `'static`.
struct Output<'l, 'c> {
    lifetimes: &'l Lifetimes,
    cx: &'c mut Ctxt,
}

impl Output<'_, '_> {
    fn elided(&mut self, span: Span) {
        let Lifetimes { name, generic, .. } = self.lifetimes;
        let more = if *generic { ", .." } else { "" };
        self.cx.error(
            span,
            format!(
                "the output type cannot borrow with an elided lifetime; declare a lifetime after the workflow's name and name it in the parameter the output borrows from, as in `{name}<'a{more}>(x: &'a X, ..) -> &'a T`"
            ),
        );
    }
}

impl VisitMut for Output<'_, '_> {
    fn visit_type_reference_mut(&mut self, reference: &mut syn::TypeReference) {
        match &mut reference.lifetime {
            Some(lifetime) => self.visit_lifetime_mut(lifetime),
            None => {
                self.elided(reference.and_token.span);
                reference.lifetime = Some(Lifetime::new("'static", reference.and_token.span));
            }
        }
        self.visit_type_mut(&mut reference.elem);
    }

    fn visit_lifetime_mut(&mut self, lifetime: &mut Lifetime) {
        let ident = lifetime.ident.to_string();
        if ident == "static" || self.lifetimes.declared.contains(&ident) {
            return;
        }
        if ident == "_" {
            self.elided(lifetime.span());
        } else {
            let declare = self.lifetimes.declare(lifetime);
            self.cx.error(
                lifetime.span(),
                format!(
                    "undeclared lifetime `{lifetime}` in the output type; declare it after the workflow's name, as in {declare}, and name it in the parameter the output borrows from"
                ),
            );
        }
        *lifetime = Lifetime::new("'static", lifetime.span());
    }

    fn visit_type_fn_ptr_mut(&mut self, _: &mut syn::TypeFnPtr) {}
    fn visit_parenthesized_generic_arguments_mut(
        &mut self,
        _: &mut syn::ParenthesizedGenericArguments,
    ) {
    }
    fn visit_trait_bound_mut(&mut self, bound: &mut syn::TraitBound) {
        if bound.lifetimes.is_none() {
            visit_mut::visit_trait_bound_mut(self, bound);
        }
    }
}
