//! The items of a `#[flow(durable)]` workflow.

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;

use super::input::Input;
use crate::parse::Workflow;

/// The items of a `#[flow(durable)]` workflow: its `DurableWorkflow` impl (`compensates`:
/// whether a run of it has compensations to run when it is cancelled), the compile-time
/// checks that its parameters and output can be stored (spanned on their types), and the
/// inherent `resume` and `resume_all`.
pub fn durable_items(
    workflow: &Workflow,
    input: &Input,
    private: &TokenStream,
    output_ty: &TokenStream,
    compensates: TokenStream,
) -> TokenStream {
    if workflow.generics.lifetimes().next().is_some() {
        // Refused (`check::durable`): nothing more to report about it.
        return TokenStream::new();
    }
    let name = &workflow.name;
    let vis = &workflow.vis;
    let input_ty = &input.ty;
    let lifetime = &input.lifetime;
    let generics = Generic::of(workflow);
    // A type that names a type parameter is checked by a bound of the impl instead (it holds
    // for some arguments only): its error is then at the use with the others.
    let checks = workflow
        .params
        .iter()
        .map(|p| &p.ty)
        .filter(|ty| !generics.names(ty))
        .map(|ty| quote_spanned!(ty.span()=> #private::assert_durable::<#ty>();));
    let output_check = workflow
        .output_ty
        .as_ref()
        .filter(|ty| !generics.names(ty))
        .map(|ty| quote_spanned!(ty.span()=> #private::assert_durable::<#ty>();));
    let (impl_generics, ty_generics, where_clause) = workflow.generics.split_for_impl();
    let bounds = generics.bounds(workflow, private);
    let durable_where = match (where_clause, bounds.is_empty()) {
        (_, true) => quote!(#where_clause),
        (clause, false) => {
            let predicates = clause.iter().flat_map(|clause| clause.predicates.iter());
            quote!(where #(#predicates,)* #(#bounds),*)
        }
    };
    // The methods that need the impl say so: a generic workflow is durable for some arguments.
    let needs_durable = match generics.is_generic() {
        true => quote!(where Self: #private::DurableWorkflow),
        false => TokenStream::new(),
    };
    let durable_name = generics.name_fn(private);
    // Under `where Self: DurableWorkflow`, rustc does not see through `Self`'s `Output`: the
    // methods of a generic workflow name it as the trait's.
    let output_ty = match generics.is_generic() {
        true => quote!(<Self as #private::Workflow>::Output),
        false => output_ty.clone(),
    };
    let type_params: Vec<&syn::Ident> = generics.types.iter().chain(&generics.consts).collect();
    // Spanned on the parameters' type, so that the bound `Stored: Durable` is reported there
    // and not on the whole invocation.
    let stored_span = workflow
        .params
        .first()
        .map_or_else(|| name.span(), |p| p.ty.span());
    let stored_item =
        quote_spanned!(stored_span=> type Stored = <Self as #private::Workflow>::Input<'static>;);
    // A workflow that continues as new: its output must be a `Continue` of its stored
    // parameters (an error on the output type otherwise).
    let continues = workflow.continue_as_new.as_ref().map(|key| {
        let span = workflow
            .output_ty
            .as_ref()
            .map_or(key.span(), |ty| ty.span());
        let again = quote_spanned!(span=> #private::again::<Self::Stored, _>(output));
        quote! {
            const __CONTINUES: bool = true;

            fn __again(
                output: <Self as #private::Workflow>::Output,
            ) -> #private::Result<(Self::Stored, bool), <Self as #private::Workflow>::Output> {
                #again
            }
        }
    });
    quote! {
        #[allow(unused_variables, clippy::all)]
        const _: fn() = || {
            #(#checks)*
            #output_check
        };

        #[allow(unused_variables, clippy::all)]
        impl #impl_generics #private::DurableWorkflow for #name #ty_generics #durable_where {
            #stored_item

            fn __input<#lifetime>(
                stored: Self::Stored,
            ) -> <Self as #private::Workflow>::Input<#lifetime> {
                let stored: #input_ty = stored;
                stored
            }

            #continues

            #durable_name

            const __COMPENSATES: bool = #compensates;

            fn __check_signal(
                name: &str,
                payload: &[u8],
            ) -> #private::Result<bool, ::std::string::String> {
                Self::__flow_check_signal(name, payload)
            }
        }

        #[allow(unused_variables, dead_code, clippy::all)]
        impl #impl_generics #name #ty_generics #where_clause {
            /// Resumes the run `id` of this workflow from `store`: replays its journal
            /// (completed steps do not run again) and goes on.
            /// The future owns what it needs (a clone of the store): spawn it if you like.
            #vis fn resume<S: #private::Store + ::core::clone::Clone>(
                store: &S,
                id: &str,
            ) -> impl #private::Future<
                Output = #private::Result<#private::Outcome<#output_ty>, #private::DurableError>,
            > + use<S, #(#type_params),*> #needs_durable {
                #private::resume::<Self, S>(store, id)
            }

            /// Resumes every unfinished run of this workflow in `store`, oldest first.
            #vis fn resume_all<'s, S: #private::Store + ::core::clone::Clone>(
                store: &'s S,
            ) -> impl #private::Future<
                Output = #private::Result<
                    ::std::vec::Vec<(
                        ::std::string::String,
                        #private::Result<#private::Outcome<#output_ty>, #private::DurableError>,
                    )>,
                    #private::DurableError,
                >,
            > + 's #needs_durable {
                #private::resume_all::<Self, S>(store)
            }
        }
    }
}

/// The generic parameters of a durable workflow.
struct Generic {
    /// Its type parameters.
    types: Vec<syn::Ident>,
    /// Its const parameters.
    consts: Vec<syn::Ident>,
}

impl Generic {
    fn of(workflow: &Workflow) -> Generic {
        Generic {
            types: workflow
                .generics
                .type_params()
                .map(|p| p.ident.clone())
                .collect(),
            consts: workflow
                .generics
                .const_params()
                .map(|p| p.ident.clone())
                .collect(),
        }
    }

    fn is_generic(&self) -> bool {
        !self.types.is_empty() || !self.consts.is_empty()
    }

    /// Whether `ty` names one of the generic parameters (a type or a const).
    fn names(&self, ty: &syn::Type) -> bool {
        fn any(tokens: TokenStream, names: &[syn::Ident]) -> bool {
            tokens.into_iter().any(|token| match token {
                proc_macro2::TokenTree::Ident(ident) => names.contains(&ident),
                proc_macro2::TokenTree::Group(group) => any(group.stream(), names),
                _ => false,
            })
        }
        let names: Vec<syn::Ident> = self.types.iter().chain(&self.consts).cloned().collect();
        any(quote!(#ty), &names)
    }

    /// The bounds of the `DurableWorkflow` impl of a generic workflow: each type parameter
    /// outlives every run (`'static`), and each parameter and output type that names one can
    /// be stored.
    fn bounds(&self, workflow: &Workflow, private: &TokenStream) -> Vec<TokenStream> {
        let mut bounds: Vec<TokenStream> = self.types.iter().map(|t| quote!(#t: 'static)).collect();
        let stored = workflow
            .params
            .iter()
            .map(|p| &p.ty)
            .chain(workflow.output_ty.as_ref())
            .filter(|ty| self.names(ty));
        bounds.extend(stored.map(|ty| quote_spanned!(ty.span()=> #ty: #private::Durable)));
        bounds
    }

    /// `DurableWorkflow::durable_name` for a generic workflow: its name with its arguments.
    fn name_fn(&self, private: &TokenStream) -> Option<TokenStream> {
        if !self.is_generic() {
            return None;
        }
        let types = self
            .types
            .iter()
            .map(|t| quote!(#private::type_argument::<#t>()));
        let consts = self
            .consts
            .iter()
            .map(|c| quote!(::std::string::ToString::to_string(&#c)));
        Some(quote! {
            fn durable_name() -> ::std::borrow::Cow<'static, str> {
                #private::generic_name(
                    <Self as #private::Workflow>::GRAPH.name(),
                    &[#(#types,)* #(#consts,)*],
                )
            }
        })
    }
}
