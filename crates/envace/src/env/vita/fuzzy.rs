//! Fuzzy string scores as VitaBench's search tools use them (the `thefuzz` package): `ratio`,
//! `partial_ratio` and the ranking `process.extract` gives, on text normalised the way its
//! default processor does.
//!
//! `ratio(a, b)` is the normalised Indel similarity, `200 · LCS(a, b) / (|a| + |b|)`, where LCS
//! is the longest common subsequence in characters. `partial_ratio` aligns the shorter string
//! with every window of the longer one (full windows, and the prefixes and suffixes that
//! overhang an end) and keeps the best `ratio`. Scores are rounded to whole numbers, halves to
//! even, as `thefuzz` returns them.

/// `thefuzz`'s default processor: lower-case, every character that is not a letter or digit
/// becomes a space, and the ends are trimmed.
pub fn normalise(text: &str) -> String {
    let mapped: String = text
        .chars()
        .flat_map(|c| {
            if c.is_alphanumeric() {
                c.to_lowercase().collect::<Vec<_>>()
            } else {
                vec![' ']
            }
        })
        .collect();
    mapped.trim().to_owned()
}

/// Length of the longest common subsequence of two character slices.
fn lcs(a: &[char], b: &[char]) -> usize {
    if a.is_empty() || b.is_empty() {
        return 0;
    }
    let mut row = vec![0usize; b.len() + 1];
    for &ca in a {
        let mut diagonal = 0;
        for (j, &cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = if ca == cb {
                diagonal + 1
            } else {
                above.max(row[j])
            };
            diagonal = above;
        }
    }
    row[b.len()]
}

fn raw_ratio(a: &[char], b: &[char]) -> f64 {
    let total = a.len() + b.len();
    if total == 0 {
        return 100.0;
    }
    200.0 * lcs(a, b) as f64 / total as f64
}

/// Rounds a score to a whole number, halves to even (Python's `round`).
fn whole(score: f64) -> u32 {
    score.round_ties_even() as u32
}

/// `fuzz.ratio`: Indel similarity in 0..=100 (not normalised first).
pub fn ratio(a: &str, b: &str) -> u32 {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    whole(raw_ratio(&a, &b))
}

fn raw_partial(needle: &[char], hay: &[char]) -> f64 {
    let (m, n) = (needle.len(), hay.len());
    let mut best: f64 = 0.0;
    for i in 1..m.min(n + 1) {
        best = best.max(raw_ratio(needle, &hay[..i]));
    }
    if n >= m {
        for start in 0..=n - m {
            best = best.max(raw_ratio(needle, &hay[start..start + m]));
            if best >= 100.0 {
                return 100.0;
            }
        }
    }
    for start in n.saturating_sub(m - 1).max(1)..n {
        best = best.max(raw_ratio(needle, &hay[start..]));
    }
    best
}

/// `fuzz.partial_ratio`: the best `ratio` of the shorter string against windows of the longer
/// one (not normalised first). 0 when either is empty.
pub fn partial_ratio(a: &str, b: &str) -> u32 {
    whole(partial_score(a, b))
}

/// [`partial_ratio`] before rounding (what rankings sort by).
pub fn partial_score(a: &str, b: &str) -> f64 {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    if a.is_empty() || b.is_empty() {
        return 0.0;
    }
    if a.len() < b.len() {
        raw_partial(&a, &b)
    } else if b.len() < a.len() {
        raw_partial(&b, &a)
    } else {
        raw_partial(&a, &b).max(raw_partial(&b, &a))
    }
}

/// `process.extract(query, choices, limit=None, scorer=fuzz.partial_ratio)`: every choice's
/// index with its score on normalised text, rounded, best first by the unrounded score, ties in
/// the choices' order. An empty normalised query scores every choice 0.
pub fn rank<'a>(query: &str, choices: impl IntoIterator<Item = &'a str>) -> Vec<(usize, u32)> {
    let query = normalise(query);
    let mut scored: Vec<(usize, f64)> = choices
        .into_iter()
        .enumerate()
        .map(|(idx, choice)| {
            let score = if query.is_empty() {
                0.0
            } else {
                partial_score(&query, &normalise(choice))
            };
            (idx, score)
        })
        .collect();
    scored.sort_by(|a, b| b.1.total_cmp(&a.1));
    scored.into_iter().map(|(i, s)| (i, whole(s))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_scores() {
        // Values as `thefuzz` 0.22 / rapidfuzz 3 give them.
        assert_eq!(ratio("this is a test", "this is a test!"), 97);
        assert_eq!(partial_ratio("this is a test", "this is a test!"), 100);
        assert_eq!(
            ratio("fuzzy wuzzy was a bear", "wuzzy fuzzy was a bear"),
            91
        );
        assert_eq!(partial_ratio("abc", "xxabcxx"), 100);
        assert_eq!(partial_ratio("noodle", "rice noodles"), 100);
        assert_eq!(ratio("", ""), 100);
        assert_eq!(partial_ratio("abcd", "xbcy"), 57);
        assert_eq!(partial_ratio("hello world", "worl hel"), 62);
        assert_eq!(partial_ratio("xyzab", "abq"), 80);
        assert_eq!(
            partial_ratio(
                "kunming wuhua",
                "yunnan university affiliated hospital  160 meters southeast of the intersection"
            ),
            48
        );
        assert_eq!(partial_ratio("", "abc"), 0);
        assert_eq!(normalise("  Rice-Noodles, (Mild)! "), "rice noodles   mild");
    }

    #[test]
    fn ranking_is_stable_and_best_first() {
        let ranked = rank(
            "noodles",
            ["Bakery cakes", "Rice noodles", "Noodle bar noodles"],
        );
        assert_eq!(ranked[0].1, 100);
        assert_eq!(ranked[0].0, 1, "ties keep the choices' order");
        assert_eq!(ranked[1].0, 2);
        assert!(ranked[2].1 < 100);
    }
}
