//! "Did you mean ...?" for misspelt names.

/// The candidate closest to `word`, if it is close enough to be a likely typo.
pub(crate) fn closest<'a>(word: &str, candidates: &[&'a str]) -> Option<&'a str> {
    candidates
        .iter()
        .map(|c| (edit_distance(word, c), *c))
        .filter(|(d, c)| *d <= (c.len().max(word.len()) / 3).max(1))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// The end of an "unknown argument" message: "; did you mean `near`?" for a likely typo of one
/// of `candidates`, else "; expected one of " and all of them.
pub(crate) fn unknown_hint(word: &str, candidates: &[&str]) -> String {
    match closest(word, candidates) {
        Some(near) => format!("; did you mean `{near}`?"),
        None => format!("; expected one of {}", list(candidates)),
    }
}

/// `names` as a message lists them: "`a`, `b`, `c`".
pub(crate) fn list(names: &[&str]) -> String {
    names
        .iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Levenshtein distance over chars.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitution = diagonal + usize::from(ca != *cb);
            diagonal = row[j + 1];
            row[j + 1] = substitution.min(row[j] + 1).min(row[j + 1] + 1);
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::closest;

    #[test]
    fn suggests_near_names_only() {
        let names = ["none", "full", "equal", "decorrelated"];
        assert_eq!(closest("fulll", &names), Some("full"));
        assert_eq!(closest("decorelated", &names), Some("decorrelated"));
        assert_eq!(closest("zzzzzz", &names), None);
        assert_eq!(
            closest("attempt_timout", &["max", "attempt_timeout"]),
            Some("attempt_timeout")
        );
    }
}
