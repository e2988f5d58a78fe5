//! The workflow's header: attributes (`#[flow(..)]`), visibility, name, generics, parameters,
//! output type and `where` clause; then its body, split into steps and output.

use proc_macro2::{Span, TokenStream};
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::{Attribute, Expr, Ident, Token, Type, Visibility};

use super::ast::{Opt, OptValue, Param, Workflow};
use super::steps::steps;
use super::tokens::{last_span, parse_within, split_output};
use crate::ctxt::Ctxt;
use crate::suggest::did_you_mean;

/// The workflow's header, and its body's tokens.
struct Header {
    attrs: Vec<Attribute>,
    vis: Visibility,
    name: Ident,
    generics: syn::Generics,
    params: Vec<Param>,
    output_ty: Option<Type>,
    body: TokenStream,
    body_span: Span,
}

/// Parses the invocation. The header (name, generics, parameters, output type, `where` clause)
/// must be well formed; inside the body, each malformed step is recorded in `cx` and skipped.
pub fn workflow(input: TokenStream, cx: &mut Ctxt) -> syn::Result<Workflow> {
    let header = |input: ParseStream| -> syn::Result<Header> {
        let attrs = input.call(Attribute::parse_outer)?;
        let vis: Visibility = input.parse()?;
        let name: Ident = input.parse().map_err(|e| {
            syn::Error::new(
                e.span(),
                "expected the workflow's name, as in `pub Checkout(order_id: u64) { .. }`",
            )
        })?;
        let mut generics: syn::Generics = input.parse()?;
        if !input.peek(syn::token::Paren) {
            return Err(input.error("expected the workflow's parameters in parentheses after its name, as in `Checkout(order_id: u64)`; write `()` for none"));
        }
        let content;
        syn::parenthesized!(content in input);
        let params = Punctuated::<Param, Token![,]>::parse_terminated(&content)?;
        // As in a `fn`: the `where` clause comes after the output type.
        if input.peek(Token![where]) {
            generics.where_clause = Some(input.parse()?);
        }
        let output_ty = if input.peek(Token![->]) {
            input.parse::<Token![->]>()?;
            if let Some(clause) = &generics.where_clause {
                return Err(syn::Error::new(
                    clause.where_token.span,
                    "the `where` clause goes after the output type, as in `Name<T>(x: T) -> T where T: Clone { .. }`",
                ));
            }
            let ty = input.parse::<Type>()?;
            if input.peek(Token![where]) {
                generics.where_clause = Some(input.parse()?);
            }
            Some(ty)
        } else {
            None
        };
        if !input.peek(syn::token::Brace) {
            return Err(input.error("expected the workflow's body in braces"));
        }
        let body;
        let brace = syn::braced!(body in input);
        let tokens: TokenStream = body.parse()?;
        if !input.is_empty() {
            return Err(input.error(
                "unexpected tokens after the workflow's body; write one workflow per `workflow!`",
            ));
        }
        Ok(Header {
            attrs,
            vis,
            name,
            generics,
            params: params.into_iter().collect(),
            output_ty,
            body: tokens,
            body_span: brace.span.join(),
        })
    };
    let end = last_span(&input);
    let Header {
        mut attrs,
        vis,
        name,
        generics,
        params,
        output_ty,
        body: body_tokens,
        body_span,
    } = parse_within(header, input, end)?;
    let (fail_fast, krate, (durable, continue_as_new)) = workflow_options(&mut attrs, cx);
    let (steps_tokens, output_tokens) = split_output(body_tokens);
    let cx_saw_arrow = output_tokens.is_some();
    let output = match output_tokens {
        Some((arrow, tokens)) if tokens.is_empty() => {
            cx.error(
                arrow,
                "expected the workflow's output expression after `=>`",
            );
            None
        }
        Some((_, tokens)) => {
            let end = last_span(&tokens);
            match parse_within(Expr::parse, tokens, end) {
                Ok(expr) => Some(expr),
                Err(e) => {
                    cx.push(e);
                    None
                }
            }
        }
        None => None,
    };
    let body = steps(steps_tokens, cx);
    let has_output = output.is_some() || cx_saw_arrow;
    Ok(Workflow {
        has_output,
        attrs,
        fail_fast,
        krate,
        durable,
        continue_as_new,
        vis,
        name,
        generics,
        params,
        output_ty,
        body,
        body_span,
        output,
    })
}

/// The failure policy `failure = ..` names, if it is one.
fn policy_name(expr: &Expr) -> Option<&'static str> {
    match expr {
        Expr::Path(path) if path.path.is_ident("FailFast") => Some("FailFast"),
        Expr::Path(path) if path.path.is_ident("ContinueIndependent") => {
            Some("ContinueIndependent")
        }
        _ => None,
    }
}

/// One option of `#[flow(..)]`: `name = value`, or a flag (`durable`, `continue_as_new`).
enum FlowOpt {
    Flag(Ident),
    Opt(Opt),
}

impl Parse for FlowOpt {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        if input.peek(Ident) && !input.peek2(Token![=]) {
            let key: Ident = input.parse()?;
            if key == "durable" || key == "continue_as_new" {
                return Ok(FlowOpt::Flag(key));
            }
            return Err(syn::Error::new(
                key.span(),
                format!(
                    "expected `{key} = value` (only `durable` and `continue_as_new` are written alone)"
                ),
            ));
        }
        input.parse().map(FlowOpt::Opt)
    }
}

/// The flags of `#[flow(..)]`: `durable` and `continue_as_new`, by their tokens.
type Flags = (Option<Ident>, Option<Ident>);

/// Takes the `#[flow(..)]` attributes out of `attrs`; returns whether the policy is `FailFast`,
/// the path of `crate = path`, and the flags `durable` and `continue_as_new`.
fn workflow_options(attrs: &mut Vec<Attribute>, cx: &mut Ctxt) -> (bool, Option<syn::Path>, Flags) {
    let mut fail_fast = false;
    let mut seen = false;
    let mut krate = None;
    let mut durable: Option<Ident> = None;
    let mut continues: Option<Ident> = None;
    attrs.retain(|attr| {
        if !attr.path().is_ident("flow") {
            return true;
        }
        let parsed = attr.parse_args_with(Punctuated::<FlowOpt, Token![,]>::parse_terminated);
        match parsed {
            Ok(options) => {
                for opt in options {
                    let opt = match opt {
                        FlowOpt::Flag(key) => {
                            let flag = match key == "durable" {
                                true => &mut durable,
                                false => &mut continues,
                            };
                            if flag.is_some() {
                                cx.error(key.span(), format!("duplicate option `{key}`"));
                            }
                            *flag = Some(key);
                            continue;
                        }
                        FlowOpt::Opt(opt) => opt,
                    };
                    match (opt.key.to_string().as_str(), &opt.value) {
                        ("failure", OptValue::Other(expr)) if policy_name(expr).is_some() => {
                            if seen {
                                cx.error(opt.key.span(), "duplicate option `failure`");
                            }
                            seen = true;
                            fail_fast = policy_name(expr) == Some("FailFast");
                        }
                        ("failure", other) => cx.error(other.span(), "`failure` takes `FailFast` or `ContinueIndependent`"),
                        ("crate", value) => {
                            if krate.is_some() {
                                cx.error(opt.key.span(), "duplicate option `crate`");
                            }
                            match crate_path(value) {
                                Ok(path) => krate = Some(path),
                                Err(error) => cx.push(error),
                            }
                        }
                        (other, _) => {
                            let message = match did_you_mean(other, ["failure", "crate", "durable", "continue_as_new"]) {
                                hint if hint.is_empty() => format!("unknown workflow option `{other}`: expected `failure = FailFast`, `failure = ContinueIndependent`, `crate = path`, `durable` or `continue_as_new`"),
                                hint => format!("unknown workflow option `{other}`{hint}"),
                            };
                            cx.error(opt.key.span(), message);
                        }
                    }
                }
            }
            Err(e) => cx.push(e),
        }
        false
    });
    if let (Some(key), None) = (&continues, &durable) {
        cx.error(
            key.span(),
            "`continue_as_new` needs `durable`: only a durable run continues as new (`#[flow(durable, continue_as_new)]`)",
        );
    }
    (fail_fast, krate, (durable, continues))
}

/// The path of a `crate = path` option (`#[flow(..)]`, `#[operation(..)]`): a plain path, such
/// as `::my_flow` or `crate::reexported`, with no generic arguments.
pub fn crate_path(value: &OptValue) -> syn::Result<syn::Path> {
    const EXPECTED: &str = "`crate` takes the path of the flow crate, as in `crate = ::my_flow`";
    let error = match value {
        OptValue::Other(expr) => syn::Error::new_spanned(expr, EXPECTED),
        other => syn::Error::new(other.span(), EXPECTED),
    };
    crate_path_of(value).ok_or(error)
}

fn crate_path_of(value: &OptValue) -> Option<syn::Path> {
    match value {
        OptValue::Other(expr) => match &**expr {
            Expr::Path(syn::ExprPath {
                qself: None,
                path,
                attrs,
            }) if attrs.is_empty()
                && path
                    .segments
                    .iter()
                    .all(|s| matches!(s.arguments, syn::PathArguments::None)) =>
            {
                Some(path.clone())
            }
            _ => None,
        },
        _ => None,
    }
}

impl Parse for Param {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let name: Ident = input
            .parse()
            .map_err(|e| syn::Error::new(e.span(), "expected a parameter `name: Type`"))?;
        input.parse::<Token![:]>()?;
        let ty: Type = input.parse()?;
        Ok(Param { name, ty })
    }
}
