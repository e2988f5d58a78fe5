//! "Did you mean": the closest known name to a misspelled one, and where a token is written.

use proc_macro2::Span;

/// The edit distance between two names: insertions, deletions, substitutions and swaps of two
/// neighbouring characters each count one (optimal string alignment, as rustc counts).
pub fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    // Three rows of the table: two back, one back, and the current one.
    let mut before: Vec<usize> = vec![0; b.len() + 1];
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    let mut current: Vec<usize> = vec![0; b.len() + 1];
    for i in 1..=a.len() {
        current[0] = i;
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (previous[j] + 1)
                .min(current[j - 1] + 1)
                .min(previous[j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(before[j - 2] + 1);
            }
            current[j] = best;
        }
        std::mem::swap(&mut before, &mut previous);
        std::mem::swap(&mut previous, &mut current);
    }
    previous[b.len()]
}

/// The candidate closest to `name`, if one is close enough to be what was meant: at most
/// `max(1, len / 3)` edits away, or the same name in another case. Ties go to the first.
/// Failing that, a candidate that begins as `name` does but for its last character (`retry`
/// for `retries`, `timeo` for `timeout`): a shortened or singular form that the edit limit
/// rules out because the names differ in length.
pub fn closest<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let length = name.chars().count();
    let limit = (length / 3).max(1);
    let mut best: Option<(usize, &str)> = None;
    let mut stem: Option<&str> = None;
    for candidate in candidates {
        if candidate == name {
            continue;
        }
        if stem.is_none() && same_stem(name, candidate) {
            stem = Some(candidate);
        }
        // Each edit changes the length by at most one: skip the table for far lengths.
        if candidate.chars().count().abs_diff(length) > limit {
            continue;
        }
        let distance = if candidate.eq_ignore_ascii_case(name) {
            0
        } else {
            edit_distance(name, candidate)
        };
        if distance <= limit && best.is_none_or(|(d, _)| distance < d) {
            best = Some((distance, candidate));
        }
    }
    best.map(|(_, candidate)| candidate).or(stem)
}

/// Whether one of `a` and `b` begins with all of the shorter one but its last character, that
/// part being at least three characters long (ASCII case ignored).
fn same_stem(a: &str, b: &str) -> bool {
    let a: Vec<char> = a.chars().map(|c| c.to_ascii_lowercase()).collect();
    let b: Vec<char> = b.chars().map(|c| c.to_ascii_lowercase()).collect();
    let shorter = a.len().min(b.len());
    let common = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    shorter >= 4 && common + 1 >= shorter
}

/// `"; did you mean `x`?"` when a candidate is close to `name`, or nothing.
pub fn did_you_mean<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> String {
    closest(name, candidates).map_or_else(String::new, |c| format!("; did you mean `{c}`?"))
}

/// Where a token is written, for a message that names another place: ` (line 12)`, or nothing
/// when the span has no location (tokens made by another macro).
pub fn at_line(span: Span) -> String {
    match span.start().line {
        0 => String::new(),
        line => format!(" (line {line})"),
    }
}

/// As [`at_line`], for a sentence: ` on line 12`, or nothing.
pub fn on_line(span: Span) -> String {
    match span.start().line {
        0 => String::new(),
        line => format!(" on line {line}"),
    }
}

#[cfg(test)]
mod tests {
    use super::{closest, edit_distance};

    #[test]
    fn distances() {
        assert_eq!(edit_distance("fetch", "fetch"), 0);
        assert_eq!(edit_distance("fecth", "fetch"), 1);
        assert_eq!(edit_distance("timout", "timeout"), 1);
        assert_eq!(edit_distance("retires", "retries"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }

    #[test]
    fn suggestions() {
        let nodes = ["fetch_user", "store", "fetch_order"];
        assert_eq!(closest("fetch_usr", nodes), Some("fetch_user"));
        assert_eq!(closest("fecth_order", nodes), Some("fetch_order"));
        assert_eq!(closest("Store", nodes), Some("store"));
        assert_eq!(closest("ghost", nodes), None);
        // One edit is always allowed, two only from six characters on.
        assert_eq!(closest("ab", ["ax"]), Some("ax"));
        assert_eq!(closest("ab", ["xy"]), None);
        assert_eq!(closest("abcde", ["abxye"]), None);
        assert_eq!(closest("abcdef", ["abxyef"]), Some("abxyef"));
        // A shortened or singular form, too far by edits alone.
        assert_eq!(closest("retry", ["timeout", "retries"]), Some("retries"));
        assert_eq!(closest("Retry", ["retries"]), Some("retries"));
        assert_eq!(closest("timeo", ["timeout"]), Some("timeout"));
        assert_eq!(
            closest("max_concurrent", ["max_concurrency"]),
            Some("max_concurrency")
        );
        // Not a stem of three characters or fewer, nor one that differs earlier.
        assert_eq!(closest("ret", ["retries"]), None);
        assert_eq!(closest("rexry", ["retries"]), None);
    }
}
