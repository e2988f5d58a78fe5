//! The runtime's modules form layers: a module imports (`use crate::…`, or an inline
//! `crate::…` path) only modules of lower layers. This test reads every file under `src/`,
//! maps it to its top-level module (`scheduler/attempt.rs` is `scheduler`, `lib.rs` is `lib`),
//! and fails with the file, line and path of every import that goes up a layer, or sideways
//! to another module of the same layer. `src/lib.rs` and `docs/architecture.md` describe the
//! same table.

use std::path::{Path, PathBuf};

/// The layers, lowest first. A module imports only modules of the layers before its own.
const LAYERS: &[&[&str]] = &[
    // Plain data: statuses, policies, output cells, wakers, paths in nested graphs, the
    // records of compensations, a run tree's exclusion groups, the attempt being polled (its
    // idempotency key).
    &[
        "status",
        "policy",
        "slot",
        "wake",
        "path",
        "compensation",
        "exclusion",
        "attempt",
    ],
    // Errors, the static graph, events (and the sink of nested events), `#[operation]` defaults.
    &["error", "graph", "events", "scope"],
    // Caught panics and timers, signals and mailboxes, what a decision's test reads, progress.
    &["panic", "signal", "run_state", "progress"],
    // The report of a finished run (with the summary of a nest node's instances: a `Report`
    // holds `NestReport`s, which hold the `Report`s of some instances, so both are one module).
    &["report"],
    // A run's options; the end of a run (`Finished`, `Verdict`).
    &["options", "verdict"],
    // What a nest node's driver gets from the run that holds it.
    &["nest_ctx"],
    // The node set.
    &["nodes"],
    // The run loop and its hook; the node of a `Delay` step.
    &["scheduler", "delay"],
    // What generated code calls to run a node set; a one-node run without the scheduler.
    &["support", "one"],
    // The `Workflow` trait and `Runner`.
    &["runner"],
    // Nest nodes and the sub-workflow driver.
    &["nest"],
    // The drivers of `ForEach` and `Loop` nodes.
    &["drivers"],
    // Durable runs (feature `durable`): storage and metrics (recorded by durable runs and
    // workers alone; empty calls without feature `metrics`), the journal and its user's side,
    // the worker.
    &["store", "metrics"],
    &["durable"],
    &["worker"],
    // The crate root: re-exports and `__private`.
    &["lib"],
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&module))
}

/// The top-level module a file under `src/` belongs to.
fn module_of(relative: &Path) -> String {
    let first = relative
        .components()
        .next()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .unwrap_or_default();
    first.strip_suffix(".rs").unwrap_or(&first).to_owned()
}

fn rust_files(dir: &Path, into: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|error| panic!("cannot read {}: {error}", dir.display()))
        .map(|entry| entry.map(|e| e.path()))
        .collect::<Result<_, _>>()
        .unwrap_or_else(|error| panic!("cannot read {}: {error}", dir.display()));
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, into);
        } else if path.extension().is_some_and(|e| e == "rs") {
            into.push(path);
        }
    }
}

/// One import: the line it is on, the module it names, and the text as written.
struct Import {
    line: usize,
    module: String,
    text: String,
}

/// The code of `source` with its comments blanked (line numbers kept). String literals are
/// kept as they are: none of the runtime's holds `//` before a `crate::` path.
fn without_comments(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut chars = source.chars().peekable();
    let mut block = 0usize;
    while let Some(c) = chars.next() {
        if block > 0 {
            if c == '*' && chars.peek() == Some(&'/') {
                chars.next();
                block -= 1;
            } else if c == '/' && chars.peek() == Some(&'*') {
                chars.next();
                block += 1;
            } else if c == '\n' {
                out.push('\n');
            }
            continue;
        }
        if c == '/' && chars.peek() == Some(&'/') {
            for rest in chars.by_ref() {
                if rest == '\n' {
                    out.push('\n');
                    break;
                }
            }
            continue;
        }
        if c == '/' && chars.peek() == Some(&'*') {
            chars.next();
            block = 1;
            continue;
        }
        out.push(c);
    }
    out
}

/// Every `crate::…` path in `code`: a `use crate::{a, b::c}` group gives one import per
/// top-level name.
fn imports(code: &str) -> Vec<Import> {
    let bytes = code.as_bytes();
    let mut found = Vec::new();
    let mut at = 0;
    while let Some(offset) = code[at..].find("crate::") {
        let start = at + offset;
        at = start + "crate::".len();
        // `$crate::` and `other_crate::` are not this crate's paths.
        if start > 0 {
            let before = bytes[start - 1];
            if before.is_ascii_alphanumeric() || before == b'_' || before == b'$' || before == b':'
            {
                continue;
            }
        }
        let line = code[..start].matches('\n').count() + 1;
        let rest = &code[at..];
        let names: Vec<String> = if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 1;
            let mut end = group.len();
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            end = i;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            let mut names = Vec::new();
            let mut depth = 0;
            let mut current = String::new();
            for c in group[..end].chars() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => names.push(std::mem::take(&mut current)),
                    _ => {}
                }
                if !(c == ',' && depth == 0) {
                    current.push(c);
                }
            }
            names.push(current);
            names
        } else {
            vec![rest.to_owned()]
        };
        for name in names {
            let name = name.trim();
            let module: String = name
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if module.is_empty() {
                continue;
            }
            let text: String = name
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | ':' | '*'))
                .collect();
            // `crate::__private` and the items re-exported at the root (`crate::Report`) are
            // the crate root's.
            let root = module == "__private" || module.starts_with(|c: char| c.is_uppercase());
            found.push(Import {
                line,
                module: if root { "lib".to_owned() } else { module },
                text: format!("crate::{text}"),
            });
        }
    }
    found
}

/// Every import of a module that is not strictly below the importing module's layer.
fn violations(src: &Path) -> Vec<String> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut found = Vec::new();
    for file in files {
        let relative = file.strip_prefix(src).unwrap_or(&file).to_path_buf();
        let module = module_of(&relative);
        let Some(layer) = layer_of(&module) else {
            found.push(format!(
                "{}: module `{module}` is in no layer of the table in tests/layers.rs",
                relative.display()
            ));
            continue;
        };
        let source = std::fs::read_to_string(&file)
            .unwrap_or_else(|error| panic!("cannot read {}: {error}", file.display()));
        for import in imports(&without_comments(&source)) {
            if import.module == module {
                continue;
            }
            match layer_of(&import.module) {
                Some(target) if target < layer => {}
                Some(target) => found.push(format!(
                    "{}:{}: `{}` goes {} (`{module}` is in layer {layer}, `{}` in layer {target})",
                    relative.display(),
                    import.line,
                    import.text,
                    if target == layer { "sideways" } else { "up" },
                    import.module,
                    layer = layer + 1,
                    target = target + 1,
                )),
                None => found.push(format!(
                    "{}:{}: `{}` names `{}`, which is in no layer",
                    relative.display(),
                    import.line,
                    import.text,
                    import.module,
                )),
            }
        }
    }
    found
}

#[test]
fn every_import_goes_down_a_layer() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let found = violations(&src);
    assert!(
        found.is_empty(),
        "imports against the layers (see the table in tests/layers.rs):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_reader_finds_every_form_of_import() {
    let code = without_comments(
        "use crate::a::B;\nuse crate::{c::D, e::{F, G}};\n// crate::comment::X\n\
         fn f() -> crate::h::I { $crate::j::K; other_crate::l::M }\n/* crate::n */ crate::Root",
    );
    let names: Vec<(usize, String)> = imports(&code)
        .into_iter()
        .map(|i| (i.line, i.module))
        .collect();
    let expected = [(1, "a"), (2, "c"), (2, "e"), (4, "h"), (5, "lib")];
    let expected: Vec<(usize, String)> = expected
        .iter()
        .map(|&(line, module)| (line, module.to_owned()))
        .collect();
    assert_eq!(names, expected);
}
