//! The AST: a workflow as written, every step with the user's tokens (`Ident`s, `Expr`s) kept
//! for spans. Later stages read it; only the parser builds it.

use proc_macro2::{Span, TokenStream};
use syn::spanned::Spanned;
use syn::{Attribute, Expr, Ident, LitInt, LitStr, Type, Visibility};

/// A whole `workflow!` invocation.
pub struct Workflow {
    /// The attributes other than `#[flow(..)]`, for the workflow's type.
    pub attrs: Vec<Attribute>,
    /// `#[flow(failure = FailFast)]`.
    pub fail_fast: bool,
    /// `#[flow(crate = path)]`: where generated code finds flow (`::flow` when `None`).
    pub krate: Option<syn::Path>,
    /// `#[flow(durable)]`: the `durable` token.
    pub durable: Option<Ident>,
    /// `#[flow(durable, continue_as_new)]`: the `continue_as_new` token (the workflow's
    /// output is a `Continue`).
    pub continue_as_new: Option<Ident>,
    /// The workflow type's visibility.
    pub vis: Visibility,
    /// The workflow's name, which names its type.
    pub name: Ident,
    /// `<'a, T: Clone>` after the name, with the `where` clause written after the output type
    /// (or after the parameters when there is none), as in a `fn`.
    pub generics: syn::Generics,
    /// The parameters, as written (a duplicate too).
    pub params: Vec<Param>,
    /// `-> Type`.
    pub output_ty: Option<Type>,
    /// The steps of the body, run in sequence.
    pub body: Vec<Step>,
    /// The braces around the body.
    pub body_span: Span,
    /// The output expression after `=>`, when it parsed.
    pub output: Option<Expr>,
    /// Whether the body has `=>` (even when what follows it did not parse).
    pub has_output: bool,
}

/// A workflow parameter `name: Type`.
pub struct Param {
    /// The parameter's name.
    pub name: Ident,
    /// The parameter's type.
    pub ty: Type,
}

/// One step of a block.
pub enum Step {
    /// `[name =] Operation(call, options)`.
    Operation(OpStep),
    /// `Sequential(options) { steps }`.
    Sequential(BlockStep),
    /// `Parallel(options) { steps }`.
    Parallel(BlockStep),
    /// `Conditional(test) { steps } else { steps }`.
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
    Signal(SignalStep),
    /// `Delay("48h")` or `Delay(expr)`: waits for a duration.
    Delay(DelayStep),
    /// `Pick { trigger => { steps }, .. }`: the first event to come chooses its arm.
    Pick(PickStep),
    /// `ForEach(..) { .. }`, `Loop(..) ..` or `Workflow(Child(..))`: a node that runs a nested
    /// graph.
    Nest(std::rc::Rc<NestStep>),
    /// `Complete(name)`: completes a `ForEach` with the outputs so far.
    Complete(CompleteStep),
    /// A step that did not parse (its error is recorded). It keeps its block from looking empty,
    /// so one mistake does not also report "empty block".
    Invalid,
}

/// `[name =] Operation(call, options)`.
pub struct OpStep {
    /// The binding of the step's output.
    pub name: Option<Ident>,
    /// `Operation`, as written.
    pub keyword: Ident,
    /// The async call.
    pub call: Expr,
    /// Its options.
    pub options: Vec<Opt>,
}

/// A block: `Sequential`, `Parallel` or `Race`, with its options and its steps.
pub struct BlockStep {
    /// Its options.
    pub options: Vec<Opt>,
    /// The steps of the block.
    pub steps: Vec<Step>,
    /// The braces around the steps.
    pub brace: Span,
}

/// `Cancel(target)`.
pub struct CancelStep {
    /// The step's keyword, as written.
    pub keyword: Ident,
    /// What it withdraws.
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

/// `Terminate(value)`.
pub struct TermStep {
    /// The step's keyword, as written.
    pub keyword: Ident,
    /// The run's output.
    pub value: Expr,
}

/// `[name =] Race { .. }` or `[name =] Parallel(min = k, ..) { .. }`.
pub struct GateStep {
    /// Binds the gate's output: the winning arm (`Race`) or the completed arms.
    pub name: Option<Ident>,
    /// `Race` or `Parallel`, as written.
    pub keyword: Ident,
    /// A `Race`, rather than a `Parallel(min = k)`.
    pub race: bool,
    /// Its options and its arms.
    pub block: BlockStep,
}

/// `Conditional(test) { then } else { otherwise }`.
pub struct CondStep {
    /// The step's keyword, as written.
    pub keyword: Ident,
    /// The test.
    pub test: Expr,
    /// The steps run when the test is true.
    pub then: Vec<Step>,
    /// The braces around them.
    pub then_brace: Span,
    /// The `else` keyword's span and the branch's steps.
    pub otherwise: Option<(Span, Vec<Step>)>,
    /// For a version marker, `Patched("id") { new } else { old }`: its id. Its test is the
    /// run's: whether the run started with a graph that had the marker.
    pub patch: Option<syn::LitStr>,
}

/// `key = value` in a step's options.
pub struct Opt {
    /// The option's name.
    pub key: Ident,
    /// Its value.
    pub value: OptValue,
}

/// The value of an option, sorted by the shapes the options take.
pub enum OptValue {
    /// `[a, b]`, with the brackets' span.
    Names(Vec<Ident>, Span),
    Str(LitStr),
    Int(LitInt),
    /// Any other expression.
    Other(Box<Expr>),
}

impl OptValue {
    /// Where the value is written.
    pub fn span(&self) -> Span {
        match self {
            OptValue::Names(_, span) => *span,
            OptValue::Str(lit) => lit.span(),
            OptValue::Int(lit) => lit.span(),
            OptValue::Other(expr) => expr.span(),
        }
    }
}

/// `name = Signal(signal: Type, transient)`.
pub struct SignalStep {
    /// The binding of the step's output.
    pub name: Option<Ident>,
    /// The step's keyword, as written.
    pub keyword: Ident,
    /// The signal's name.
    pub signal: Ident,
    /// The payload's type.
    pub ty: Type,
    /// `transient`: refused when sent while no step waits.
    pub transient: bool,
    /// What is inside the parentheses, for the node's label.
    pub args: TokenStream,
}

/// `name = Delay("48h")` or `Delay(expr)`.
pub struct DelayStep {
    /// The binding of the step's output.
    pub name: Option<Ident>,
    /// The step's keyword, as written.
    pub keyword: Ident,
    /// The literal or the `Duration` expression.
    pub after: Expr,
    /// The literal's duration in milliseconds; `None` for an expression.
    pub ms: Option<u64>,
}

/// `Pick { trigger => { steps }, .. }`.
pub struct PickStep {
    /// The step's keyword, as written.
    pub keyword: Ident,
    /// Its arms, in source order.
    pub arms: Vec<PickArm>,
}

/// One arm: a `Signal` or `Delay` step, and the steps it starts.
pub struct PickArm {
    /// The `Signal` or `Delay` step that chooses the arm.
    pub trigger: Step,
    /// The steps it starts.
    pub body: Vec<Step>,
}

/// `[name =] ForEach(..) { .. }`, `[name =] Loop(..) ..` or `[name =] Workflow(Child(..))`.
pub struct NestStep {
    /// The binding of the step's output.
    pub name: Option<Ident>,
    /// The step's keyword, as written.
    pub keyword: Ident,
    /// Which kind of nest, with its own parts.
    pub what: What,
    /// The body as a workflow of its own (no body for a sub-workflow step): its steps and its
    /// output; the rest of it is filled when it is checked.
    pub body: Option<Workflow>,
}

/// What kind of nest, with what only that kind has.
pub enum What {
    ForEach(ForEach),
    Loop(Loop),
    Workflow(SubWorkflow),
}

/// `[name =] ForEach(item in source, options) { body }`.
pub struct ForEach {
    /// The name each instance binds its item to.
    pub item: Ident,
    /// `item in stream expr`.
    pub stream: bool,
    /// What it iterates.
    pub source: Expr,
    /// `max_concurrency = N`.
    pub max_concurrency: Option<u32>,
    /// `min = k`: the `ForEach` completes once `k` instances did.
    pub min: Option<u32>,
    /// `rest = cancel` (the default) or `rest = run`.
    pub rest_cancel: bool,
    /// `on_failure = collect`.
    pub collect: bool,
    /// `after = [..]`.
    pub after: Vec<Ident>,
}

/// `[name =] Loop(options) { body } until (test)` or `Loop(options) while (test) { body }`.
pub struct Loop {
    /// The most iterations it may run.
    pub max: u32,
    /// `prev = name`: the binding of the previous iteration's output.
    pub prev: Option<Ident>,
    /// `on_max = stop`.
    pub stop_at_max: bool,
    /// The test.
    pub test: Expr,
    /// `while (test) { .. }`, or `{ .. } until (test)`.
    pub while_: bool,
    /// `until` or `while`, as written.
    pub test_keyword: Ident,
    /// `after = [..]`.
    pub after: Vec<Ident>,
}

/// `[name =] Workflow(Child(args), options)`.
pub struct SubWorkflow {
    /// The child workflow's type, as written: `Payment`, `billing::Payment`.
    pub child: syn::Path,
    /// The arguments of its `run`.
    pub args: Vec<Expr>,
    /// `Payment(ctx, &order)`, for the node's label.
    pub call: Expr,
    /// `after = [..]`.
    pub after: Vec<Ident>,
}

/// `Complete(name)`: completes the `ForEach` `name` with the outputs of the instances that
/// completed, and withdraws the others.
pub struct CompleteStep {
    /// The step's keyword, as written.
    pub keyword: Ident,
    /// The `ForEach` it completes.
    pub target: Ident,
}

impl NestStep {
    /// The steps named in `after = [..]`.
    pub fn after(&self) -> &[Ident] {
        match &self.what {
            What::ForEach(each) => &each.after,
            What::Loop(repeat) => &repeat.after,
            What::Workflow(sub) => &sub.after,
        }
    }

    /// The step's keyword as a constant: `ForEach`, `Loop` or `Workflow`.
    pub fn kind_name(&self) -> &'static str {
        match self.what {
            What::ForEach(_) => "ForEach",
            What::Loop(_) => "Loop",
            What::Workflow(_) => "Workflow",
        }
    }
}
