//! Token helpers of the parser: where an input ends, parsing within a delimiter, and splitting
//! a body at its top-level commas and at its `=>`.

use proc_macro2::{Delimiter, Span, TokenStream, TokenTree};
use syn::Ident;
use syn::parse::{ParseStream, Parser};

use crate::ctxt::Ctxt;

/// The span of the last token of `tokens`, or the call site when there is none.
pub fn last_span(tokens: &TokenStream) -> Span {
    tokens
        .clone()
        .into_iter()
        .last()
        .map_or_else(Span::call_site, |t| t.span())
}

/// Parses all of `tokens` with `parser`, like `Parser::parse2`, except that an error at the end
/// of the input ("expected an expression") lands on `end` (the closing delimiter, or the last
/// token) rather than on the macro's call site.
pub fn parse_within<T>(
    parser: impl FnOnce(ParseStream) -> syn::Result<T>,
    tokens: TokenStream,
    end: Span,
) -> syn::Result<T> {
    let mut group = proc_macro2::Group::new(Delimiter::Parenthesis, tokens);
    group.set_span(end);
    let within = |input: ParseStream| -> syn::Result<T> {
        let content;
        syn::parenthesized!(content in input);
        let value = parser(&content)?;
        if !content.is_empty() {
            return Err(content.error("unexpected token"));
        }
        Ok(value)
    };
    within.parse2(TokenStream::from(TokenTree::Group(group)))
}

/// Splits `steps… => output` at the first top-level `=>`.
pub fn split_output(tokens: TokenStream) -> (TokenStream, Option<(Span, TokenStream)>) {
    let trees: Vec<TokenTree> = tokens.into_iter().collect();
    for i in 0..trees.len().saturating_sub(1) {
        if let (TokenTree::Punct(eq), TokenTree::Punct(gt)) = (&trees[i], &trees[i + 1])
            && eq.as_char() == '='
            && gt.as_char() == '>'
            && eq.spacing() == proc_macro2::Spacing::Joint
        {
            let before = trees[..i].iter().cloned().collect();
            let after = trees[i + 2..].iter().cloned().collect();
            return (before, Some((eq.span(), after)));
        }
    }
    (trees.into_iter().collect(), None)
}

/// The pieces of `tokens` between top-level commas, each with the span of the comma after it
/// (the call site for the last piece, which has none). A trailing comma adds no empty piece.
pub fn split_commas(tokens: TokenStream) -> Vec<(Vec<TokenTree>, Span)> {
    let mut chunks = Vec::new();
    let mut chunk = Vec::new();
    for tree in tokens {
        match &tree {
            TokenTree::Punct(p) if p.as_char() == ',' => {
                chunks.push((std::mem::take(&mut chunk), p.span()));
            }
            _ => chunk.push(tree),
        }
    }
    if !chunk.is_empty() {
        chunks.push((chunk, Span::call_site()));
    }
    chunks
}

/// The group `tree` is, if it has `delimiter`.
pub fn group(tree: Option<&TokenTree>, delimiter: Delimiter) -> Option<&proc_macro2::Group> {
    match tree {
        Some(TokenTree::Group(g)) if g.delimiter() == delimiter => Some(g),
        _ => None,
    }
}

/// The parenthesized arguments of a step such as `Operation(..)`, alone after its keyword:
/// `missing` is the error when there are no parentheses, `empty` when they hold nothing.
pub fn call_args(
    keyword: &Ident,
    rest: &[TokenTree],
    missing: &str,
    empty: &str,
    cx: &mut Ctxt,
) -> Option<proc_macro2::Group> {
    let Some(args) = group(rest.first(), Delimiter::Parenthesis) else {
        cx.error(keyword.span(), missing);
        return None;
    };
    if let Some(extra) = rest.get(1) {
        cx.error(
            extra.span(),
            format!("unexpected tokens after `{keyword}(..)`; separate steps with commas"),
        );
        return None;
    }
    if args.stream().is_empty() {
        cx.error(args.span(), empty);
        return None;
    }
    Some(args.clone())
}
