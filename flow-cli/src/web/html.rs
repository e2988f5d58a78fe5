//! HTML text: every value read from a store goes through [`esc`] before it is written into a
//! page, an attribute or a picture, so a run id, an error or a payload with markup or script in
//! it is shown as text, never run.

use std::fmt::Write as _;

use crate::table::printable;

/// `text` escaped for HTML text and attribute values (`&`, `<`, `>`, `"`, `'`), after control
/// characters and bidirectional overrides are shown as escapes (`\u{1b}`), as on a terminal:
/// a value can neither add markup nor reorder what follows it.
pub(crate) fn esc(text: &str) -> String {
    let shown = printable(text);
    let mut out = String::with_capacity(shown.len() + 16);
    for c in shown.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// `text` as one component of a URL (a path segment or a query value): every byte but the
/// unreserved ones percent-encoded. Safe inside an attribute as it is.
pub(crate) fn url(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(char::from(byte));
            }
            byte => {
                let _ = write!(out, "%{byte:02X}");
            }
        }
    }
    out
}

/// What every page shares: where it is mounted, and whether actions are on.
pub(crate) struct Frame<'a> {
    /// The path the view is mounted under (`""` at the root, `"/flow"` when nested).
    pub(crate) base: &'a str,
    /// The store's name (its file, or its server), shown in the header.
    pub(crate) store: &'a str,
    /// Whether the actions (signal, cancel, redrive) are on.
    pub(crate) actions: bool,
}

/// A whole page: `title` (text, escaped here) and `body` (HTML, escaped by its maker).
pub(crate) fn page(frame: &Frame<'_>, title: &str, body: &str) -> String {
    let base = frame.base;
    let mode = if frame.actions {
        r#"<span class="mode actions">actions on</span>"#.to_owned()
    } else {
        r#"<span class="mode" title="start the view with --allow-actions to send signals, cancel and redrive">read-only</span>"#
            .to_owned()
    };
    format!(
        r#"<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title} · flow</title>
<link rel="stylesheet" href="{base}/static/view.css">
<script src="{base}/static/view.js" defer></script>
</head>
<body>
<header><a class="brand" href="{base}/runs">flow</a> <span class="store">{store}</span> {mode}</header>
<main>
{body}
</main>
</body>
</html>
"#,
        title = esc(title),
        store = esc(frame.store),
    )
}

/// A value as shown in a table cell: whole when short, else its first [`SHORT`] characters
/// with the rest (up to [`LONG`]) behind a `<details>`, and a link to the whole value when
/// it is longer still.
pub(crate) fn value(text: &str, whole: Option<&str>) -> String {
    let count = text.chars().count();
    if count <= SHORT {
        return format!("<code>{}</code>", esc(text));
    }
    let cut = text
        .char_indices()
        .nth(SHORT)
        .map_or(text.len(), |(i, _)| i);
    let long = text.char_indices().nth(LONG).map_or(text.len(), |(i, _)| i);
    let more = match (long < text.len(), whole) {
        (true, Some(href)) => format!(
            r#" <a href="{href}">all {} characters</a>"#,
            super::thousands(count)
        ),
        (true, None) => format!(
            " (cut at {} of {} characters)",
            LONG,
            super::thousands(count)
        ),
        (false, _) => String::new(),
    };
    format!(
        r#"<details class="value"><summary><code>{}</code>… ({} characters)</summary><pre>{}</pre>{more}</details>"#,
        esc(&text[..cut]),
        super::thousands(count),
        esc(&text[..long]),
    )
}

/// Text (an error) as a page shows it: as [`value`] does, in the page's font rather than as
/// code.
pub(crate) fn text(text: &str, whole: Option<&str>) -> String {
    if text.chars().count() <= SHORT {
        return esc(text);
    }
    value(text, whole)
}

/// At most [`SHORT`] characters of `text`, escaped, with the count of the rest: an event's
/// fields in the journal's table.
pub(crate) fn short(text: &str) -> String {
    match text.char_indices().nth(SHORT) {
        Some((cut, _)) => format!(
            "<code>{}</code>… ({} characters)",
            esc(&text[..cut]),
            super::thousands(text.chars().count())
        ),
        None => format!("<code>{}</code>", esc(text)),
    }
}

/// How many characters of a value a table shows before it folds the rest away.
pub(crate) const SHORT: usize = 200;
/// How many characters of a value a page holds at most (the rest is a link away).
pub(crate) const LONG: usize = 64 * 1024;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_and_controls_are_text() {
        assert_eq!(
            esc(r#"<script>alert('x')</script> & "q""#),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;q&quot;"
        );
        assert_eq!(esc("a\u{202e}b\u{1b}[2J"), "a\\u{202e}b\\u{1b}[2J");
        assert_eq!(url("a b/<c>&ü"), "a%20b%2F%3Cc%3E%26%C3%BC");
    }

    #[test]
    fn long_values_fold() {
        assert_eq!(value("<b>", None), "<code>&lt;b&gt;</code>");
        let long = "x".repeat(SHORT + 1);
        let shown = value(&long, None);
        assert!(shown.starts_with("<details"), "{shown}");
        assert!(shown.contains("201 characters"), "{shown}");
        let huge = "y".repeat(LONG + 5);
        let shown = value(&huge, Some("/v"));
        assert!(shown.contains(r#"<a href="/v">all 65,541 characters</a>"#));
        assert!(shown.len() < LONG + 1000);
    }
}
