//! A resilience policy as a constant expression of the runtime's `NodePolicy`.

use proc_macro2::TokenStream;
use quote::{ToTokens, quote};

use crate::parse::policy::{Backoff, Policy};

fn some<T: ToTokens>(value: Option<T>) -> TokenStream {
    match value {
        Some(v) => quote!(::core::option::Option::Some(#v)),
        None => quote!(::core::option::Option::None),
    }
}

/// The policy as a constant expression, naming the runtime through `private` (the path of its
/// hidden module).
pub fn tokens(policy: &Policy, private: &TokenStream) -> TokenStream {
    if policy.is_empty() {
        return quote!(#private::NodePolicy::NONE);
    }
    let timeout = some(policy.timeout_ms);
    let retries = some(policy.retries);
    let backoff = some(policy.backoff.map(|b| match b {
        Backoff::Fixed(ms) => quote!(#private::Backoff::Fixed { ms: #ms }),
        Backoff::Exponential(base_ms, max_ms) => {
            quote!(#private::Backoff::Exponential { base_ms: #base_ms, max_ms: #max_ms })
        }
    }));
    let jitter = some(policy.jitter);
    let deadline = some(policy.deadline_ms);
    quote!(#private::node_policy(#timeout, #retries, #backoff, #jitter, #deadline))
}
