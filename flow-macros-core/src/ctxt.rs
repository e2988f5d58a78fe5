//! Error accumulation: every error of one invocation is collected and reported together.

use proc_macro2::Span;
use std::fmt::Display;

/// The errors of one invocation, in the order they were found.
#[derive(Default)]
pub struct Ctxt {
    errors: Vec<syn::Error>,
}

impl Ctxt {
    /// Records an error with `message` on `span`.
    pub fn error(&mut self, span: Span, message: impl Display) {
        self.errors.push(syn::Error::new(span, message));
    }

    /// Records an error syn gave.
    pub fn push(&mut self, error: syn::Error) {
        self.errors.push(error);
    }

    /// Whether any error was recorded.
    pub fn has_errors(&self) -> bool {
        !self.errors.is_empty()
    }

    /// All errors merged into one, in the order they were found.
    pub fn into_error(self) -> Option<syn::Error> {
        let mut errors = self.errors.into_iter();
        let mut first = errors.next()?;
        for e in errors {
            first.combine(e);
        }
        Some(first)
    }
}
