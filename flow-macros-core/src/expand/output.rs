//! The run's output: the output expression over the slots it reads, and the cell where a
//! `Terminate` step puts the output it gives.

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::Ident;
use syn::spanned::Spanned;

use super::names::Names;

/// The run's output: the output expression, or `Ok(())` without one.
pub fn output(names: &Names<'_>) -> TokenStream {
    let checked = names.checked;
    let private = &names.private;
    let Some(expr) = &names.workflow.output else {
        return quote!(#private::Result::Ok(()));
    };
    let inputs = checked.output_uses.iter().map(|(ident, source)| {
        let slot = names.slot(*source);
        if checked.sure[*source] {
            let display = &checked.dag.nodes[*source].display;
            quote!(let #ident = #private::require(#slot, #display)?;)
        } else {
            quote!(let #ident = &#slot.get();)
        }
    });
    let expr = names.rewrite(expr, checked.output_uses.iter().map(|(ident, _)| ident));
    let output_ty = match &names.workflow.output_ty {
        Some(ty) => quote!(#ty),
        None => quote!(()),
    };
    let span = expr.span();
    let value = quote_spanned!(span=> { let __flow_output: #output_ty = #expr; __flow_output });
    quote!({
        #(#inputs)*
        #private::Result::Ok(#value)
    })
}

/// The cell where a `Terminate` step puts the run's output.
pub fn term_cell() -> Ident {
    Ident::new("__flow_term", Span::mixed_site())
}
