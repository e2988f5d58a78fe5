//! Node labels: the source text of a step as the user wrote it, shown in the graph.

use proc_macro2::{Delimiter, TokenStream, TokenTree};
use syn::Expr;

use crate::parse::{NestStep, What};

/// The text of an expression, for labels: as the user wrote it (`parse::<u32>(&s)`), on one
/// line; or, for tokens without a position in the source (made by another macro), its tokens
/// spaced as people write them.
pub fn source_text(expr: &Expr) -> String {
    let tokens = quote::ToTokens::to_token_stream(expr);
    as_written(tokens.clone()).unwrap_or_else(|| tidy(tokens))
}

/// The tokens as written: each token's own source text, and one space wherever the source has
/// space, a comment or a line break between two tokens. `None` when a token has no position or
/// the positions do not follow the tokens.
///
/// Each token is read on its own: inside the compiler a span that covers the whole expression
/// exists only on nightly (`Span::join`).
fn as_written(tokens: TokenStream) -> Option<String> {
    let mut text = Text {
        out: String::new(),
        end: None,
    };
    text.trees(tokens)?;
    Some(text.out)
}

struct Text {
    out: String,
    /// Where the last token ends: (line, column).
    end: Option<(usize, usize)>,
}

impl Text {
    fn trees(&mut self, tokens: TokenStream) -> Option<()> {
        for tree in tokens {
            match tree {
                TokenTree::Group(group) => {
                    let (open, close) = match group.delimiter() {
                        Delimiter::Parenthesis => ('(', ')'),
                        Delimiter::Brace => ('{', '}'),
                        Delimiter::Bracket => ('[', ']'),
                        Delimiter::None => {
                            self.trees(group.stream())?;
                            continue;
                        }
                    };
                    // A reprinted group keeps only its whole span: the delimiters are its
                    // first and last character.
                    let (start, end) = (group.span().start(), group.span().end());
                    self.piece(
                        &open.to_string(),
                        (start.line, start.column),
                        (start.line, start.column + 1),
                    )?;
                    self.trees(group.stream())?;
                    let close_start = (end.line, end.column.checked_sub(1)?);
                    self.piece(&close.to_string(), close_start, (end.line, end.column))?;
                }
                other => {
                    let span = other.span();
                    let text = span.source_text().unwrap_or_else(|| other.to_string());
                    let (start, end) = (span.start(), span.end());
                    self.piece(&text, (start.line, start.column), (end.line, end.column))?;
                }
            }
        }
        Some(())
    }

    fn piece(&mut self, text: &str, start: (usize, usize), end: (usize, usize)) -> Option<()> {
        if start.0 == 0 || end < start {
            return None;
        }
        if let Some(last) = self.end {
            if start < last {
                return None;
            }
            if start > last {
                self.out.push(' ');
            }
        }
        self.out.push_str(text);
        self.end = Some(end);
        Some(())
    }
}

/// The tokens, spaced as people write them.
fn tidy(tokens: TokenStream) -> String {
    let mut text = tokens.to_string();
    for (spaced, tight) in [
        (" :: ", "::"),
        (":: ", "::"),
        (" . ", "."),
        (" ,", ","),
        ("( ", "("),
        (" )", ")"),
        ("[ ", "["),
        (" ]", "]"),
        ("& ", "&"),
        (" ?", "?"),
        (" (", "("),
        ("! (", "!("),
        ("(| ", "(|"),
        (" | ", "| "),
    ] {
        text = text.replace(spaced, tight);
    }
    text
}

/// The label of a nest node in the graph: `line in order.lines()`, `max = 20, until st.ready`,
/// `Payment(ctx, &order)`.
pub fn nest_label(step: &NestStep) -> String {
    let text = source_text;
    match &step.what {
        What::ForEach(each) => format!(
            "{} in {}{}",
            each.item,
            if each.stream { "stream " } else { "" },
            text(&each.source)
        ),
        What::Loop(repeat) => format!(
            "max = {}, {} {}",
            repeat.max,
            repeat.test_keyword,
            text(&repeat.test)
        ),
        What::Workflow(sub) => text(&sub.call),
    }
}

#[cfg(test)]
mod tests {
    use super::source_text;
    use syn::Expr;

    fn written(source: &str) -> String {
        let expr: Expr = syn::parse_str(source).expect("an expression");
        source_text(&expr)
    }

    #[test]
    fn labels_keep_the_source_text() {
        assert_eq!(written("parse::<u32>(&s)"), "parse::<u32>(&s)");
        assert_eq!(
            written("q  &&\n   !flag.load(Ordering::SeqCst)"),
            "q && !flag.load(Ordering::SeqCst)"
        );
        assert_eq!(written("f(a, /* b */ c)"), "f(a, c)");
        assert_eq!(
            written("xs.iter().map(|x| x * 2)"),
            "xs.iter().map(|x| x * 2)"
        );
        assert_eq!(
            written("r#type(1_000u32, \"a  b\")"),
            "r#type(1_000u32, \"a  b\")"
        );
    }

    #[test]
    fn tokens_without_a_position_are_spaced_tidily() {
        let made: Expr = syn::parse_quote!(fetch(&order, ctx.id));
        assert_eq!(source_text(&made), "fetch(&order, ctx.id)");
    }
}
