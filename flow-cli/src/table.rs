//! Plain-text output: aligned columns, as `kubectl get` prints them, and UTC times. Every
//! value read from a store goes through [`printable`] first: a run id, a step's name or an
//! error with terminal escapes in it is shown, not obeyed.

use std::borrow::Cow;
use std::io::{self, Write};

pub(crate) use flowdag_runtime::store::utc;

/// `text` with every control character (C0, DEL, C1) and every bidirectional override shown
/// as an escape (`\u{1b}`) instead of written: what a store holds may come from anyone, and a
/// terminal would act on those characters (clear the screen, set the title, recolour or
/// reorder what follows). A line break is escaped too: one value stays on one line.
pub(crate) fn printable(text: &str) -> Cow<'_, str> {
    let hostile =
        |c: char| c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
    if !text.chars().any(hostile) {
        return Cow::Borrowed(text);
    }
    let mut shown = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => shown.push_str("\\n"),
            '\t' => shown.push_str("\\t"),
            '\r' => shown.push_str("\\r"),
            c if hostile(c) => shown.push_str(&format!("\\u{{{:x}}}", u32::from(c))),
            c => shown.push(c),
        }
    }
    Cow::Owned(shown)
}

/// Rows of cells under a header, written with each column as wide as its widest cell.
pub(crate) struct Table<const N: usize> {
    rows: Vec<[String; N]>,
}

impl<const N: usize> Table<N> {
    pub(crate) fn new(header: [&str; N]) -> Table<N> {
        Table {
            rows: vec![header.map(str::to_owned)],
        }
    }

    /// Rows without a header (the next lines of a table already printed).
    pub(crate) fn headless() -> Table<N> {
        Table { rows: Vec::new() }
    }

    /// Adds a row; each cell is made [`printable`].
    pub(crate) fn row(&mut self, cells: [String; N]) {
        self.rows.push(cells.map(|cell| match printable(&cell) {
            Cow::Borrowed(_) => cell,
            Cow::Owned(shown) => shown,
        }));
    }

    /// Writes the rows, each column padded to its widest cell (cells of any width).
    pub(crate) fn write(&self, out: &mut dyn Write) -> io::Result<()> {
        let mut widths = [0; N];
        for row in &self.rows {
            for (width, cell) in widths.iter_mut().zip(row) {
                *width = (*width).max(cell.chars().count());
            }
        }
        for row in &self.rows {
            let mut line = String::new();
            for (i, (cell, width)) in row.iter().zip(widths).enumerate() {
                line.push_str(cell);
                if i + 1 < N {
                    // Padded by hand: a width in a format string is limited to 65,535.
                    let pad = width - cell.chars().count() + 2;
                    line.extend(std::iter::repeat_n(' ', pad));
                }
            }
            writeln!(out, "{}", line.trim_end())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_of_any_width_are_aligned() {
        let wide = "x".repeat(70_000);
        let mut table = Table::new(["ID", "STATUS"]);
        table.row([wide.clone(), "ok".to_owned()]);
        table.row(["a".to_owned(), "failed".to_owned()]);
        let mut out = Vec::new();
        table.write(&mut out).expect("written");
        let text = String::from_utf8(out).expect("UTF-8");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[1], format!("{wide}  ok"));
        assert_eq!(lines[2], format!("a{}failed", " ".repeat(70_001)));
    }

    #[test]
    fn control_characters_are_shown_not_written() {
        assert_eq!(printable("plain id"), "plain id");
        assert_eq!(
            printable("\u{1b}]0;owned\u{7}\u{1b}[2J"),
            "\\u{1b}]0;owned\\u{7}\\u{1b}[2J"
        );
        assert_eq!(printable("a\nb\r\tc"), "a\\nb\\r\\tc");
        assert_eq!(printable("\u{9b}31m"), "\\u{9b}31m", "a C1 CSI");
        assert_eq!(
            printable("abc\u{202e}fed"),
            "abc\\u{202e}fed",
            "a bidi override"
        );
        let mut table = Table::new(["ID"]);
        table.row(["\u{1b}[31mOK".to_owned()]);
        let mut out = Vec::new();
        table.write(&mut out).expect("written");
        assert!(!out.contains(&0x1b), "{out:?}");
    }

    #[test]
    fn columns_are_as_wide_as_their_widest_cell() {
        let mut table = Table::new(["ID", "STATUS"]);
        table.row(["order-42".to_owned(), "running".to_owned()]);
        let mut out = Vec::new();
        table.write(&mut out).expect("writes");
        assert_eq!(
            String::from_utf8(out).expect("text"),
            "ID        STATUS\norder-42  running\n"
        );
    }
}
