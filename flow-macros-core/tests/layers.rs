//! The layers of the crate hold: every module under `src/` reaches other modules only through
//! paths (`use crate::..`, `crate::..::f(..)` in code, `super::..`), and every such path names a
//! module of its own layer or of a layer it may import. [`LAYERS`] is the rule; the comment at
//! the top of `src/lib.rs` shows the same table, and [`lib_rs_shows_the_rule`] keeps the two
//! equal.
//!
//! The scan is textual and small: comments, strings and character literals are blanked, the
//! rest is cut into identifiers and punctuation, and each path after `crate::` or `super::` is
//! followed, braces (`use crate::{a, b::c}`) and inline modules (`mod tests { use super::.. }`)
//! included.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A layer: the top-level modules of `src/` it holds, and the layers below it that it may
/// import. A module may always import its own layer.
struct Layer {
    name: &'static str,
    modules: &'static [&'static str],
    imports: &'static [&'static str],
}

/// The layers, bottom up.
const LAYERS: &[Layer] = &[
    Layer {
        name: "base",
        modules: &["ctxt", "suggest"],
        imports: &[],
    },
    Layer {
        name: "parse",
        modules: &["parse"],
        imports: &["base"],
    },
    Layer {
        name: "graph",
        modules: &["graph"],
        imports: &["base", "parse"],
    },
    Layer {
        name: "check",
        modules: &["check"],
        imports: &["base", "parse", "graph"],
    },
    Layer {
        name: "expand",
        modules: &["expand"],
        imports: &["base", "parse", "graph", "check"],
    },
];

/// `lib.rs`, the crate root: it declares the modules and its entry points call `expand`.
const ROOT: &str = "root";

#[test]
fn imports_go_down_the_layers() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    assert!(files.len() > 10, "found only {files:?} under {src:?}");
    let mut broken = Vec::new();
    for file in &files {
        let relative = file
            .strip_prefix(&src)
            .unwrap_or(file)
            .to_string_lossy()
            .replace('\\', "/");
        let module = module_path(&relative);
        let Some(layer) = layer_of_file(&module) else {
            broken.push(format!(
                "src/{relative}: the module `{}` is in no layer; add it to `LAYERS` in tests/layers.rs and to the table in src/lib.rs",
                module[0]
            ));
            continue;
        };
        let text = match std::fs::read_to_string(file) {
            Ok(text) => text,
            Err(error) => panic!("cannot read {file:?}: {error}"),
        };
        for reference in references(&text, &module) {
            if let Some(why) = forbidden(layer, &reference) {
                broken.push(format!("src/{relative}:{}: {why}", reference.line));
            }
        }
    }
    assert!(
        broken.is_empty(),
        "imports that break the layers (base <- parse <- graph <- check <- expand; see src/lib.rs):\n{}",
        broken.join("\n")
    );
}

/// Why `reference`, in a file of `layer`, breaks the rule; `None` when it keeps it.
fn forbidden(layer: &str, reference: &Reference) -> Option<String> {
    let written = &reference.written;
    let Some(target) = &reference.top else {
        return Some(format!("`{written}` goes above the crate root"));
    };
    let Some(to) = layer_of_module(target) else {
        return Some(format!(
            "`{written}` names `crate::{target}`, which is in no layer: only the modules of `LAYERS` are imported"
        ));
    };
    if layer == ROOT || to == layer {
        return None;
    }
    let allowed = LAYERS
        .iter()
        .find(|l| l.name == layer)
        .map_or(&[][..], |l| l.imports);
    if allowed.contains(&to) {
        return None;
    }
    let may = match allowed {
        [] => format!("nothing but {layer}"),
        _ => format!("{layer}, {}", allowed.join(", ")),
    };
    Some(format!(
        "`{written}` imports `{target}` (layer {to}) into layer {layer}, which may import {may}"
    ))
}

fn layer_of_module(module: &str) -> Option<&'static str> {
    LAYERS
        .iter()
        .find(|l| l.modules.contains(&module))
        .map(|l| l.name)
}

fn layer_of_file(module: &[String]) -> Option<&'static str> {
    match module.first() {
        None => Some(ROOT),
        Some(top) => layer_of_module(top),
    }
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(error) => panic!("cannot list {dir:?}: {error}"),
    };
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    for path in paths {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The module a file under `src/` is: `parse/nest/mod.rs` is `parse::nest`, `lib.rs` the root.
fn module_path(relative: &str) -> Vec<String> {
    let mut parts: Vec<String> = relative.split('/').map(str::to_string).collect();
    if let Some(last) = parts.pop() {
        let stem = last.trim_end_matches(".rs");
        if stem != "mod" && stem != "lib" {
            parts.push(stem.to_string());
        }
    }
    parts
}

/// A path to another module.
#[derive(Debug, PartialEq)]
struct Reference {
    line: usize,
    /// The path as written, braces expanded: `crate::parse::Step`, `super::order::Ancestors`.
    written: String,
    /// The top-level module it reaches (`parse`), or `None` above the crate root.
    top: Option<String>,
}

/// Every path of `text` (the source of module `module`) that starts at `crate` or `super`.
fn references(text: &str, module: &[String]) -> Vec<Reference> {
    let tokens = tokens(&blank(text));
    let mut out = Vec::new();
    // Inline modules (`mod tests {`) around the current token, with the brace depth each opened at.
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0;
    let mut i = 0;
    while i < tokens.len() {
        let (line, token) = (tokens[i].0, tokens[i].1.as_str());
        let next = |k: usize| tokens.get(i + k).map(|t| t.1.as_str());
        match token {
            "{" => depth += 1,
            "}" => {
                depth -= 1;
                if inline.last().is_some_and(|(_, at)| *at == depth) {
                    inline.pop();
                }
            }
            "mod" if next(2) == Some("{") => {
                if let Some(name) = next(1) {
                    inline.push((name.to_string(), depth));
                }
            }
            "crate" | "super" if next(1) == Some("::") && (i == 0 || tokens[i - 1].1 != "$") => {
                let mut supers = 0;
                let mut at = i;
                while tokens.get(at).is_some_and(|t| t.1 == "super")
                    && tokens.get(at + 1).is_some_and(|t| t.1 == "::")
                {
                    supers += 1;
                    at += 2;
                }
                if supers == 0 {
                    at += 2;
                }
                let (paths, end) = tree(&tokens, at);
                let mut here: Vec<String> = module.to_vec();
                here.extend(inline.iter().map(|(name, _)| name.clone()));
                let prefix = if supers == 0 {
                    "crate".to_string()
                } else {
                    vec!["super"; supers].join("::")
                };
                for path in paths {
                    let written = std::iter::once(prefix.clone())
                        .chain(path.iter().cloned())
                        .collect::<Vec<_>>()
                        .join("::");
                    let top = if supers == 0 {
                        path.first().cloned()
                    } else if supers > here.len() {
                        None
                    } else {
                        // Within the file itself (an inline module's parent): nothing to check.
                        if supers <= inline.len() {
                            continue;
                        }
                        let mut base = here[..here.len() - supers].to_vec();
                        base.extend(path.iter().cloned());
                        base.first().cloned()
                    };
                    out.push(Reference { line, written, top });
                }
                i = end;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// The paths of a use tree starting at token `at` (`a::b`, `a::{b, c::d}`, `*`), each as its
/// segments; and the index of the token after it.
fn tree(tokens: &[(usize, String)], at: usize) -> (Vec<Vec<String>>, usize) {
    let Some((_, token)) = tokens.get(at) else {
        return (vec![Vec::new()], at);
    };
    match token.as_str() {
        "{" => {
            let mut paths = Vec::new();
            let mut i = at + 1;
            while i < tokens.len() && tokens[i].1 != "}" {
                if tokens[i].1 == "," {
                    i += 1;
                    continue;
                }
                let (more, end) = tree(tokens, i);
                paths.extend(more);
                // Skip what follows a path in a group (`as name`) up to its comma.
                i = end;
                while i < tokens.len() && tokens[i].1 != "," && tokens[i].1 != "}" {
                    i += 1;
                }
            }
            (paths, i + 1)
        }
        // `*`, or `self` in a group (`crate::graph::{self, Dag}`): the path so far.
        "*" => (vec![Vec::new()], at + 1),
        "self" if tokens.get(at + 1).is_none_or(|t| t.1 != "::") => (vec![Vec::new()], at + 1),
        segment if is_ident(segment) => {
            if tokens.get(at + 1).is_some_and(|t| t.1 == "::") {
                let (rest, end) = tree(tokens, at + 2);
                let paths = rest
                    .into_iter()
                    .map(|mut path| {
                        path.insert(0, segment.to_string());
                        path
                    })
                    .collect();
                (paths, end)
            } else {
                (vec![vec![segment.to_string()]], at + 1)
            }
        }
        _ => (vec![Vec::new()], at),
    }
}

fn is_ident(token: &str) -> bool {
    token
        .chars()
        .next()
        .is_some_and(|c| c.is_alphabetic() || c == '_')
}

/// The source with comments, strings and character literals blanked (newlines kept, so that
/// lines still count).
fn blank(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let keep_lines = |c: char| if c == '\n' { '\n' } else { ' ' };
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        let ident_before = i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_');
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut nesting = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    nesting += 1;
                    out.push_str("  ");
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    nesting -= 1;
                    out.push_str("  ");
                    i += 2;
                    if nesting == 0 {
                        break;
                    }
                } else {
                    out.push(keep_lines(chars[i]));
                    i += 1;
                }
            }
        } else if c == 'r'
            && !ident_before
            && matches!(next, Some('"') | Some('#'))
            && raw_string_start(&chars, i + 1).is_some()
        {
            let (hashes, open) = raw_string_start(&chars, i + 1).unwrap_or((0, i + 1));
            let closing: String = std::iter::once('"')
                .chain(std::iter::repeat_n('#', hashes))
                .collect();
            let rest: String = chars[open + 1..].iter().collect();
            let length = rest.find(&closing).map_or(rest.chars().count(), |at| {
                rest[..at].chars().count() + closing.chars().count()
            });
            for &ch in &chars[i..(open + 1 + length).min(chars.len())] {
                out.push(keep_lines(ch));
            }
            i = open + 1 + length;
        } else if c == '"' {
            out.push(' ');
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    out.push(' ');
                    i += 1;
                }
                if i < chars.len() {
                    out.push(keep_lines(chars[i]));
                    i += 1;
                }
            }
            out.push(' ');
            i += 1;
        } else if c == '\'' && next == Some('\\') {
            // An escaped character: `'\n'`, `'\''`, `'\u{..}'`.
            out.push_str("  ");
            i += 2;
            while i < chars.len() && chars[i] != '\'' {
                out.push(' ');
                i += 1;
            }
            out.push(' ');
            i += 1;
        } else if c == '\'' && chars.get(i + 2) == Some(&'\'') {
            // A character: `'x'` (a lifetime `'a` has no closing quote).
            out.push_str("   ");
            i += 3;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// After the `r` of a raw string, at `at`: its number of `#`s and the index of its `"`.
fn raw_string_start(chars: &[char], at: usize) -> Option<(usize, usize)> {
    let mut hashes = 0;
    while chars.get(at + hashes) == Some(&'#') {
        hashes += 1;
    }
    (chars.get(at + hashes) == Some(&'"')).then_some((hashes, at + hashes))
}

/// Identifiers (a raw one without its `r#`), `::` and single punctuation, with their lines.
fn tokens(code: &str) -> Vec<(usize, String)> {
    let chars: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let mut line = 1;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c.is_alphanumeric() || c == '_' {
            if c == 'r' && chars.get(i + 1) == Some(&'#') {
                i += 2;
            }
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push((line, chars[start..i].iter().collect()));
        } else if c == ':' && chars.get(i + 1) == Some(&':') {
            out.push((line, "::".to_string()));
            i += 2;
        } else {
            out.push((line, c.to_string()));
            i += 1;
        }
    }
    out
}

/// The comment at the top of `src/lib.rs` shows the same layers as [`LAYERS`].
#[test]
fn lib_rs_shows_the_rule() {
    let lib = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs");
    let text = match std::fs::read_to_string(&lib) {
        Ok(text) => text,
        Err(error) => panic!("cannot read {lib:?}: {error}"),
    };
    // `// | layer | modules | may import |` rows, after the header and its rule.
    let rows: BTreeMap<String, (String, String)> = text
        .lines()
        .filter_map(|line| line.trim().strip_prefix("// |"))
        .map(|row| {
            row.split('|')
                .map(|cell| cell.trim().to_string())
                .collect::<Vec<_>>()
        })
        .filter(|cells| cells.len() >= 3 && !cells[0].starts_with('-') && cells[0] != "layer")
        .map(|cells| (cells[0].clone(), (cells[1].clone(), cells[2].clone())))
        .collect();
    for layer in LAYERS {
        let modules = layer
            .modules
            .iter()
            .map(|m| format!("`{m}`"))
            .collect::<Vec<_>>()
            .join(", ");
        let imports = match layer.imports {
            [] => "-".to_string(),
            imports => imports.join(", "),
        };
        assert_eq!(
            rows.get(layer.name),
            Some(&(modules, imports)),
            "src/lib.rs shows layer {} otherwise than tests/layers.rs",
            layer.name
        );
    }
    assert_eq!(
        rows.len(),
        LAYERS.len(),
        "src/lib.rs shows other layers: {rows:?}"
    );
}

/// The scan finds what it must, and nothing in comments or strings.
#[test]
fn the_scan_follows_every_path() {
    let source = r##"
        //! Docs name `crate::expand::Names`, which is no import.
        use crate::ctxt::Ctxt;
        use crate::{graph::{self, Dag}, suggest::*};
        use super::order::Ancestors;
        pub(crate) fn f() -> crate::parse::Workflow {
            let s = "crate::expand::x";
            let r = r#"crate::expand::y"#;
            let c = '"';
            let l: &'static str = "x";
            /* crate::expand::z /* nested */ */
            $crate::nothing();
            crate::check::check(super::super::expand::workflow())
        }
        mod tests {
            use super::f;
        }
    "##;
    let module = vec!["check".to_string(), "reads".to_string()];
    let found: Vec<(String, Option<String>)> = references(source, &module)
        .into_iter()
        .map(|r| (r.written, r.top))
        .collect();
    let expected: Vec<(String, Option<String>)> = [
        ("crate::ctxt::Ctxt", Some("ctxt")),
        ("crate::graph", Some("graph")),
        ("crate::graph::Dag", Some("graph")),
        ("crate::suggest", Some("suggest")),
        ("super::order::Ancestors", Some("check")),
        ("crate::parse::Workflow", Some("parse")),
        ("crate::check::check", Some("check")),
        ("super::super::expand::workflow", Some("expand")),
    ]
    .into_iter()
    .map(|(w, t)| (w.to_string(), t.map(str::to_string)))
    .collect();
    assert_eq!(found, expected);
    let line = references("\n\nuse crate::expand::Names;", &module)[0].line;
    assert_eq!(line, 3);
    let upward = &references("use crate::expand::Names;", &["parse".to_string()])[0];
    assert_eq!(
        forbidden("parse", upward).as_deref(),
        Some(
            "`crate::expand::Names` imports `expand` (layer expand) into layer parse, which may import parse, base"
        )
    );
    assert_eq!(forbidden("expand", upward), None);
}
