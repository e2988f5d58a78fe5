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
    let name = &workflow.name;
    let vis = &workflow.vis;
    let input_ty = &input.ty;
    let lifetime = &input.lifetime;
    let checks = workflow.params.iter().map(|p| {
        let ty = &p.ty;
        quote_spanned!(ty.span()=> #private::assert_durable::<#ty>();)
    });
    let output_check = workflow
        .output_ty
        .as_ref()
        .map(|ty| quote_spanned!(ty.span()=> #private::assert_durable::<#ty>();));
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
        impl #private::DurableWorkflow for #name {
            #stored_item

            fn __input<#lifetime>(
                stored: Self::Stored,
            ) -> <Self as #private::Workflow>::Input<#lifetime> {
                let stored: #input_ty = stored;
                stored
            }

            #continues

            const __COMPENSATES: bool = #compensates;

            fn __check_signal(
                name: &str,
                payload: &[u8],
            ) -> #private::Result<bool, ::std::string::String> {
                Self::__flow_check_signal(name, payload)
            }
        }

        #[allow(unused_variables, dead_code, clippy::all)]
        impl #name {
            /// Resumes the run `id` of this workflow from `store`: replays its journal
            /// (completed steps do not run again) and goes on.
            /// The future owns what it needs (a clone of the store): spawn it if you like.
            #vis fn resume<S: #private::Store + ::core::clone::Clone>(
                store: &S,
                id: &str,
            ) -> impl #private::Future<
                Output = #private::Result<#private::Outcome<#output_ty>, #private::DurableError>,
            > + use<S> {
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
            > + 's {
                #private::resume_all::<Self, S>(store)
            }
        }
    }
}
