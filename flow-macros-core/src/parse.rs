//! DSL syntax -> AST.
//!
//! The body of a block is split at its top-level commas before parsing, so one malformed step
//! does not hide the errors of the others: every error of the invocation is reported at once.

use proc_macro2::{Delimiter, Span, TokenStream, TokenTree};
use syn::parse::{Parse, ParseStream, Parser};
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{Attribute, Expr, Ident, LitInt, LitStr, Token, Type, Visibility, bracketed};

use crate::ctxt::Ctxt;

/// A whole `workflow!` invocation.
pub struct Workflow {
    pub attrs: Vec<Attribute>,
    /// `#[flow(failure = FailFast)]`.
    pub fail_fast: bool,
    /// `#[flow(crate = path)]`: where generated code finds flow (`::flow` when `None`).
    pub krate: Option<syn::Path>,
    /// `#[flow(durable)]`: the `durable` token.
    pub durable: Option<Ident>,
    pub vis: Visibility,
    pub name: Ident,
    /// `<'a, T: Clone>` after the name, with the `where` clause written after the output type
    /// (or after the parameters when there is none), as in a `fn`.
    pub generics: syn::Generics,
    pub params: Vec<Param>,
    pub output_ty: Option<Type>,
    /// The steps of the body, run in sequence.
    pub body: Vec<Step>,
    pub body_span: Span,
    pub output: Option<Expr>,
    /// Whether the body has `=>` (even when what follows it did not parse).
    pub has_output: bool,
}

/// A workflow parameter `name: Type`.
pub struct Param {
    pub name: Ident,
    pub ty: Type,
}

/// One step of a block.
pub enum Step {
    Operation(OpStep),
    Sequential(BlockStep),
    Parallel(BlockStep),
    Conditional(CondStep),
    /// `Cancel('label)` or `Cancel(name)`: withdraws a labelled block or a named step.
    Cancel(CancelStep),
    /// `Terminate(expr)`: ends the run successfully with `expr` as its output.
    Terminate(TermStep),
    /// `'label: step`: a step or block with a label, which `Cancel('label)` can target.
    Labelled(syn::Lifetime, Box<Step>),
    /// `Race { .. }` or `Parallel(min = k) { .. }`: a block whose children are arms of a gate.
    Gate(GateStep),
    /// `name = Signal(signal: Type)`: waits for a signal from outside.
    Signal(crate::signals::SignalStep),
    /// `Delay("48h")` or `Delay(expr)`: waits for a duration.
    Delay(crate::signals::DelayStep),
    /// `Pick { trigger => { steps }, .. }`: the first event to come chooses its arm.
    Pick(crate::pick::PickStep),
    /// `ForEach(..) { .. }`, `Loop(..) ..` or `Workflow(Child(..))`: a node that runs a nested
    /// graph.
    Nest(std::rc::Rc<crate::nest::NestStep>),
    /// `Complete(name)`: completes a `ForEach` with the outputs so far.
    Complete(crate::nest::CompleteStep),
    /// A step that did not parse (its error is recorded). It keeps its block from looking empty,
    /// so one mistake does not also report "empty block".
    Invalid,
}

pub struct OpStep {
    pub name: Option<Ident>,
    pub keyword: Ident,
    pub call: Expr,
    pub options: Vec<Opt>,
}

pub struct BlockStep {
    pub options: Vec<Opt>,
    pub steps: Vec<Step>,
    pub brace: Span,
}

pub struct CancelStep {
    pub keyword: Ident,
    pub target: CancelTarget,
}

/// What a `Cancel` withdraws.
pub enum CancelTarget {
    /// A labelled block or step: `Cancel('export)`.
    Label(syn::Lifetime),
    /// A named step: `Cancel(part)`.
    Node(Ident),
}

impl CancelTarget {
    /// The target's tokens, as written.
    pub fn tokens(&self) -> TokenStream {
        match self {
            CancelTarget::Label(label) => quote::ToTokens::to_token_stream(label),
            CancelTarget::Node(name) => quote::ToTokens::to_token_stream(name),
        }
    }
}

pub struct TermStep {
    pub keyword: Ident,
    pub value: Expr,
}

/// `[name =] Race { .. }` or `[name =] Parallel(min = k, ..) { .. }`.
pub struct GateStep {
    /// Binds the gate's output: the winning arm (`Race`) or the completed arms.
    pub name: Option<Ident>,
    /// `Race` or `Parallel`, as written.
    pub keyword: Ident,
    pub race: bool,
    pub block: BlockStep,
}

pub struct CondStep {
    pub keyword: Ident,
    pub test: Expr,
    pub then: Vec<Step>,
    pub then_brace: Span,
    pub otherwise: Option<(Span, Vec<Step>)>,
}

/// `key = value` in a step's options.
pub struct Opt {
    pub key: Ident,
    pub value: OptValue,
}

pub enum OptValue {
    Names(Vec<Ident>, Span),
    Str(LitStr),
    Int(LitInt),
    Other(Box<Expr>),
}

impl OptValue {
    pub fn span(&self) -> Span {
        match self {
            OptValue::Names(_, span) => *span,
            OptValue::Str(lit) => lit.span(),
            OptValue::Int(lit) => lit.span(),
            OptValue::Other(expr) => expr.span(),
        }
    }
}

pub const STEP_KINDS: &str = "`Operation`, `Sequential`, `Parallel`, `Conditional`, `Race`, `Pick`, `Signal`, `Delay`, `ForEach`, `Loop`, `Workflow`, `Cancel`, `Complete` or `Terminate`";

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
    let (fail_fast, krate, durable) = workflow_options(&mut attrs, cx);
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

fn policy_name(expr: &Expr) -> Option<&'static str> {
    match expr {
        Expr::Path(path) if path.path.is_ident("FailFast") => Some("FailFast"),
        Expr::Path(path) if path.path.is_ident("ContinueIndependent") => {
            Some("ContinueIndependent")
        }
        _ => None,
    }
}

/// One option of `#[flow(..)]`: `name = value`, or the flag `durable`.
enum FlowOpt {
    Durable(Ident),
    Opt(Opt),
}

impl Parse for FlowOpt {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        if input.peek(Ident) && !input.peek2(Token![=]) {
            let key: Ident = input.parse()?;
            if key == "durable" {
                return Ok(FlowOpt::Durable(key));
            }
            return Err(syn::Error::new(
                key.span(),
                format!("expected `{key} = value` (only `durable` is written alone)"),
            ));
        }
        input.parse().map(FlowOpt::Opt)
    }
}

/// Takes the `#[flow(..)]` attributes out of `attrs`; returns whether the policy is `FailFast`,
/// the path of `crate = path`, and the `durable` flag.
fn workflow_options(
    attrs: &mut Vec<Attribute>,
    cx: &mut Ctxt,
) -> (bool, Option<syn::Path>, Option<Ident>) {
    let mut fail_fast = false;
    let mut seen = false;
    let mut krate = None;
    let mut durable: Option<Ident> = None;
    attrs.retain(|attr| {
        if !attr.path().is_ident("flow") {
            return true;
        }
        let parsed = attr.parse_args_with(Punctuated::<FlowOpt, Token![,]>::parse_terminated);
        match parsed {
            Ok(options) => {
                for opt in options {
                    let opt = match opt {
                        FlowOpt::Durable(key) => {
                            if durable.is_some() {
                                cx.error(key.span(), "duplicate option `durable`");
                            }
                            durable = Some(key);
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
                            let message = match crate::suggest::did_you_mean(other, ["failure", "crate", "durable"]) {
                                hint if hint.is_empty() => format!("unknown workflow option `{other}`: expected `failure = FailFast`, `failure = ContinueIndependent`, `crate = path` or `durable`"),
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
    (fail_fast, krate, durable)
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
pub(crate) fn split_output(tokens: TokenStream) -> (TokenStream, Option<(Span, TokenStream)>) {
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

/// Splits a block's tokens at top-level commas and parses each piece as a step.
pub fn steps(tokens: TokenStream, cx: &mut Ctxt) -> Vec<Step> {
    let mut out = Vec::new();
    let mut chunk: Vec<TokenTree> = Vec::new();
    let mut chunks = Vec::new();
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
    for (chunk, comma) in chunks {
        if chunk.is_empty() {
            cx.error(comma, "expected a step before this comma");
            out.push(Step::Invalid);
            continue;
        }
        out.push(step(chunk, cx).unwrap_or(Step::Invalid));
    }
    out
}

pub(crate) fn step(chunk: Vec<TokenTree>, cx: &mut Ctxt) -> Option<Step> {
    if let Some(TokenTree::Punct(quote)) = chunk.first()
        && quote.as_char() == '\''
    {
        return labelled(chunk, cx);
    }
    let mut trees = chunk.into_iter().peekable();
    let first = trees.next()?;
    // `name = Kind(..)`?
    let (name, keyword) = match (&first, trees.peek()) {
        (TokenTree::Ident(name), Some(TokenTree::Punct(eq))) if eq.as_char() == '=' => {
            let name = name.clone();
            trees.next();
            match trees.next() {
                Some(TokenTree::Ident(kw)) => (Some(name), kw),
                Some(other) => {
                    cx.error(
                        other.span(),
                        format!("expected a step after `{name} =`: one of {STEP_KINDS}"),
                    );
                    return None;
                }
                None => {
                    cx.error(
                        name.span(),
                        format!(
                            "expected a step after `{name} =`, as in `{name} = Operation(call())`"
                        ),
                    );
                    return None;
                }
            }
        }
        (TokenTree::Ident(kw), _) => (None, kw.clone()),
        (other, _) => {
            cx.error(
                other.span(),
                format!("expected a step: one of {STEP_KINDS}"),
            );
            return None;
        }
    };
    let name = name.and_then(|name| step_name(name, cx));
    let rest: Vec<TokenTree> = trees.collect();
    let kind = keyword.to_string();
    // A `Race` or a `Parallel(min = k)` may be named: the name binds its winners; a `Signal`
    // or a `Delay` like an operation.
    if !matches!(
        kind.as_str(),
        "Operation" | "Race" | "Parallel" | "Signal" | "Delay" | "ForEach" | "Loop" | "Workflow"
    ) && let Some(name) = &name
    {
        cx.error(
            name.span(),
            format!("only an `Operation`, a `Signal`, a `Delay`, a `ForEach`, a `Loop`, a `Workflow`, a `Race` or a `Parallel(min = k)` can be named, not a `{kind}` block; name the operations inside it"),
        );
    }
    match kind.as_str() {
        "Operation" => operation(name, keyword, rest, cx).map(Step::Operation),
        "Race" => {
            let block = block(keyword.clone(), rest, cx)?;
            Some(Step::Gate(GateStep {
                name,
                keyword,
                race: true,
                block,
            }))
        }
        "Parallel" if name.is_some() || has_min(&rest) => {
            let block = block(keyword.clone(), rest, cx)?;
            if !block.options.iter().any(|o| o.key == "min")
                && let Some(name) = &name
            {
                cx.error(
                    name.span(),
                    "only an `Operation`, a `Signal`, a `Delay`, a `Race` or a `Parallel(min = k)` can be named, not a `Parallel` block without `min`; name the operations inside it",
                );
            }
            Some(Step::Gate(GateStep {
                name,
                keyword,
                race: false,
                block,
            }))
        }
        "Sequential" | "Parallel" => {
            let block = block(keyword, rest, cx)?;
            Some(if kind == "Sequential" {
                Step::Sequential(block)
            } else {
                Step::Parallel(block)
            })
        }
        "Conditional" => conditional(keyword, rest, cx).map(Step::Conditional),
        "Signal" => crate::signals::signal(name, keyword, rest, cx).map(Step::Signal),
        "Delay" => crate::signals::delay(name, keyword, rest, cx).map(Step::Delay),
        "Pick" => crate::pick::pick(keyword, rest, cx).map(Step::Pick),
        "ForEach" | "Loop" | "Workflow" => crate::nest::nest(name, keyword, rest, cx)
            .map(|nest| Step::Nest(std::rc::Rc::new(nest))),
        "Complete" => crate::nest::complete(keyword, rest, cx).map(Step::Complete),
        "Cancel" => cancel(keyword, rest, cx).map(Step::Cancel),
        "Terminate" => terminate(keyword, rest, cx).map(Step::Terminate),
        other => {
            let lower = other.to_ascii_lowercase();
            // Short forms users bring from other languages, then the closest keyword.
            let hint = match lower.as_str() {
                "op" => "; did you mean `Operation`?".to_string(),
                "sequence" | "seq" => "; did you mean `Sequential`?".to_string(),
                "par" => "; did you mean `Parallel`?".to_string(),
                "if" | "cond" => "; did you mean `Conditional`?".to_string(),
                _ => crate::suggest::did_you_mean(
                    other,
                    [
                        "Operation",
                        "Sequential",
                        "Parallel",
                        "Conditional",
                        "Race",
                        "Signal",
                        "Delay",
                        "Pick",
                        "ForEach",
                        "Loop",
                        "Workflow",
                        "Cancel",
                        "Complete",
                        "Terminate",
                    ],
                ),
            };
            let message = if hint.is_empty() {
                format!("unknown step `{other}`: expected {STEP_KINDS}")
            } else {
                format!("unknown step `{other}`{hint}")
            };
            cx.error(keyword.span(), message);
            None
        }
    }
}

/// A step's name binds the step's output in the expressions that read it, so it must be an
/// identifier Rust can bind: not a keyword (`fn`, `match`, `self`) and not `_`. Anything else is
/// reported on the name, and the step is parsed as if it had none.
fn step_name(name: Ident, cx: &mut Ctxt) -> Option<Ident> {
    // `Ident`'s parser refuses exactly the words that cannot be a binding.
    if syn::parse2::<Ident>(quote::ToTokens::to_token_stream(&name)).is_ok() {
        return Some(name);
    }
    let text = name.to_string();
    let message = match text.as_str() {
        "_" => "`_` cannot name a step; remove `_ =` to leave the step unnamed, or give it a name".to_string(),
        // The four keywords a raw identifier cannot spell.
        "self" | "Self" | "super" | "crate" => format!(
            "`{text}` is a Rust keyword and cannot name a step, not even as a raw identifier; choose another name"
        ),
        _ => format!(
            "`{text}` is a Rust keyword and cannot name a step; choose another name, or write the raw identifier `r#{text}`"
        ),
    };
    cx.error(name.span(), message);
    None
}

/// `'label: step`: the label (Rust's loop-label syntax), then the step it names.
fn labelled(chunk: Vec<TokenTree>, cx: &mut Ctxt) -> Option<Step> {
    let tokens: TokenStream = chunk.iter().cloned().collect();
    let end = last_span(&tokens);
    let parser = |input: ParseStream| -> syn::Result<(syn::Lifetime, TokenStream)> {
        let label: syn::Lifetime = input.parse()?;
        if !input.peek(Token![:]) || input.peek(Token![::]) {
            return Err(syn::Error::new(
                label.span(),
                format!(
                    "expected `{label}: ` and a step after the label, as in `{label}: Sequential {{ .. }}`"
                ),
            ));
        }
        input.parse::<Token![:]>()?;
        Ok((label, input.parse()?))
    };
    let (label, rest) = match parse_within(parser, tokens, end) {
        Ok(parsed) => parsed,
        Err(e) => {
            cx.push(e);
            return None;
        }
    };
    let rest: Vec<TokenTree> = rest.into_iter().collect();
    if rest.is_empty() {
        cx.error(
            label.span(),
            format!("expected a step after `{label}:`, as in `{label}: Sequential {{ .. }}`"),
        );
        return None;
    }
    if let Some(TokenTree::Punct(quote)) = rest.first()
        && quote.as_char() == '\''
    {
        cx.error(quote.span(), "a step takes one label; remove one of them");
        return None;
    }
    let inner = step(rest, cx)?;
    Some(Step::Labelled(label, Box::new(inner)))
}

/// The parenthesized arguments of a step such as `Operation(..)`, alone after its keyword:
/// `missing` is the error when there are no parentheses, `empty` when they hold nothing.
pub(crate) fn call_args(
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

/// `Cancel('label)` or `Cancel(name)`.
fn cancel(keyword: Ident, rest: Vec<TokenTree>, cx: &mut Ctxt) -> Option<CancelStep> {
    const EXPECTED: &str = "`Cancel` takes what it withdraws: the `'label` of a block or the name of a step, as in `Cancel('export)` or `Cancel(part)`";
    let args = call_args(&keyword, &rest, EXPECTED, EXPECTED, cx)?;
    let parser = |input: ParseStream| -> syn::Result<CancelTarget> {
        let target = if input.peek(syn::Lifetime) {
            CancelTarget::Label(input.parse()?)
        } else if input.peek(Ident) {
            CancelTarget::Node(input.parse()?)
        } else {
            return Err(input.error(EXPECTED));
        };
        if !input.is_empty() {
            return Err(input.error(EXPECTED));
        }
        Ok(target)
    };
    match parse_within(parser, args.stream(), args.span_close()) {
        Ok(target) => Some(CancelStep { keyword, target }),
        Err(e) => {
            cx.push(e);
            None
        }
    }
}

/// `Terminate(expr)`.
fn terminate(keyword: Ident, rest: Vec<TokenTree>, cx: &mut Ctxt) -> Option<TermStep> {
    const EXPECTED: &str = "expected the run's output inside `Terminate(..)`, as in `Terminate(cached.clone())`; write `Terminate(())` in a workflow without output";
    let args = call_args(&keyword, &rest, EXPECTED, EXPECTED, cx)?;
    match parse_within(Expr::parse, args.stream(), args.span_close()) {
        Ok(value) => Some(TermStep { keyword, value }),
        Err(e) => {
            cx.push(e);
            None
        }
    }
}

/// Whether a block's options (`Parallel(..)`) set `min`.
fn has_min(rest: &[TokenTree]) -> bool {
    group(rest.first(), Delimiter::Parenthesis).is_some_and(|g| {
        let trees: Vec<TokenTree> = g.stream().into_iter().collect();
        trees.windows(2).enumerate().any(|(i, w)| {
            matches!(&w[0], TokenTree::Ident(key) if key == "min")
                && matches!(&w[1], TokenTree::Punct(eq) if eq.as_char() == '=')
                && (i == 0 || matches!(&trees[i - 1], TokenTree::Punct(c) if c.as_char() == ','))
        })
    })
}

fn group(tree: Option<&TokenTree>, delimiter: Delimiter) -> Option<&proc_macro2::Group> {
    match tree {
        Some(TokenTree::Group(g)) if g.delimiter() == delimiter => Some(g),
        _ => None,
    }
}

fn operation(
    name: Option<Ident>,
    keyword: Ident,
    rest: Vec<TokenTree>,
    cx: &mut Ctxt,
) -> Option<OpStep> {
    let args = call_args(
        &keyword,
        &rest,
        "expected `Operation(call(..))`: the async call in parentheses",
        "expected the async call inside `Operation(..)`, as in `Operation(fetch(id))`",
        cx,
    )?;
    let parser = |input: ParseStream| -> syn::Result<(Expr, Vec<Opt>)> {
        let call: Expr = input.parse()?;
        let mut options = Vec::new();
        while !input.is_empty() {
            input.parse::<Token![,]>()?;
            if input.is_empty() {
                break;
            }
            options.push(input.parse::<Opt>()?);
        }
        Ok((call, options))
    };
    match parse_within(parser, args.stream(), args.span_close()) {
        Ok((call, options)) => Some(OpStep {
            name,
            keyword,
            call,
            options,
        }),
        Err(e) => {
            cx.push(e);
            None
        }
    }
}

fn parse_options(group: &proc_macro2::Group, cx: &mut Ctxt) -> Vec<Opt> {
    let parser = Punctuated::<Opt, Token![,]>::parse_terminated;
    match parse_within(parser, group.stream(), group.span_close()) {
        Ok(opts) => opts.into_iter().collect(),
        Err(e) => {
            cx.push(e);
            Vec::new()
        }
    }
}

fn block(keyword: Ident, rest: Vec<TokenTree>, cx: &mut Ctxt) -> Option<BlockStep> {
    let mut i = 0;
    let mut options = Vec::new();
    if let Some(g) = group(rest.first(), Delimiter::Parenthesis) {
        options = parse_options(g, cx);
        i = 1;
    }
    let Some(body) = group(rest.get(i), Delimiter::Brace) else {
        cx.error(
            keyword.span(),
            format!("expected `{keyword} {{ .. }}`: the steps of the block in braces"),
        );
        return None;
    };
    if let Some(extra) = rest.get(i + 1) {
        cx.error(
            extra.span(),
            format!("unexpected tokens after `{keyword} {{ .. }}`; separate steps with commas"),
        );
        return None;
    }
    Some(BlockStep {
        options,
        steps: steps(body.stream(), cx),
        brace: body.span(),
    })
}

fn conditional(keyword: Ident, rest: Vec<TokenTree>, cx: &mut Ctxt) -> Option<CondStep> {
    let Some(test) = group(rest.first(), Delimiter::Parenthesis) else {
        cx.error(
            keyword.span(),
            "expected `Conditional(test) { .. }`: the test in parentheses",
        );
        return None;
    };
    if test.stream().is_empty() {
        cx.error(
            test.span(),
            "expected a test inside `Conditional(..)`, as in `Conditional(risk.is_ok())`",
        );
        return None;
    }
    let test_expr = match parse_within(Expr::parse, test.stream(), test.span_close()) {
        Ok(expr) => expr,
        Err(e) => {
            cx.push(e);
            return None;
        }
    };
    let Some(then) = group(rest.get(1), Delimiter::Brace) else {
        cx.error(
            test.span(),
            "expected the branch to take in braces after `Conditional(test)`",
        );
        return None;
    };
    let otherwise = match rest.get(2) {
        None => None,
        Some(TokenTree::Ident(kw)) if kw == "else" => {
            let Some(body) = group(rest.get(3), Delimiter::Brace) else {
                cx.error(
                    kw.span(),
                    "expected the else branch in braces: `else { .. }`",
                );
                return None;
            };
            if let Some(extra) = rest.get(4) {
                cx.error(
                    extra.span(),
                    "unexpected tokens after `else { .. }`; separate steps with commas",
                );
                return None;
            }
            Some((kw.span(), steps(body.stream(), cx)))
        }
        Some(other) => {
            cx.error(
                other.span(),
                "expected `else { .. }` or a comma after the Conditional's branch",
            );
            return None;
        }
    };
    Some(CondStep {
        keyword,
        test: test_expr,
        then: steps(then.stream(), cx),
        then_brace: then.span(),
        otherwise,
    })
}

impl Parse for Opt {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        // Any identifier, keywords too: `crate = path` is an option.
        let key: Ident = input
            .call(syn::ext::IdentExt::parse_any)
            .map_err(|e| syn::Error::new(e.span(), "expected an option `name = value`"))?;
        if !input.peek(Token![=]) {
            return Err(syn::Error::new(
                key.span(),
                format!("expected `{key} = value`"),
            ));
        }
        input.parse::<Token![=]>()?;
        let value = if input.peek(syn::token::Bracket) {
            let content;
            let bracket = bracketed!(content in input);
            let names = Punctuated::<Ident, Token![,]>::parse_terminated(&content)?;
            OptValue::Names(names.into_iter().collect(), bracket.span.join())
        } else if input.peek(LitStr) {
            OptValue::Str(input.parse()?)
        } else if input.peek(LitInt) {
            OptValue::Int(input.parse()?)
        } else {
            OptValue::Other(Box::new(input.parse()?))
        };
        Ok(Opt { key, value })
    }
}
