//! Where a config's keys sit: dotted TOML paths (`env.domains[1]`) and the line and column of
//! each key or value, so that every issue names its place in the file.

use std::collections::HashMap;

use toml::Spanned;
use toml::de::{DeTable, DeValue};

/// A step in a TOML path: a key or an array index.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) enum Segment {
    Key(String),
    Index(usize),
}

pub(super) fn dotted(path: &[Segment]) -> String {
    let mut out = String::new();
    for segment in path {
        match segment {
            Segment::Key(key) => {
                if !out.is_empty() {
                    out.push('.');
                }
                let bare = !key.is_empty()
                    && key
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
                if bare {
                    out.push_str(key);
                } else {
                    out.push_str(&format!("{key:?}"));
                }
            }
            Segment::Index(idx) => out.push_str(&format!("[{idx}]")),
        }
    }
    out
}

/// Parses the dotted paths the cross-field rules use (bare keys and `[i]` only).
pub(super) fn parse_dotted(path: &str) -> Vec<Segment> {
    let mut out = Vec::new();
    for part in path.split('.').filter(|part| !part.is_empty()) {
        let (key, rest) = part.split_once('[').unwrap_or((part, ""));
        out.push(Segment::Key(key.to_string()));
        for idx in rest.split('[') {
            if let Ok(idx) = idx.trim_end_matches(']').parse() {
                out.push(Segment::Index(idx));
            }
        }
    }
    out
}

/// Maps byte offsets to 1-based line and column.
pub(super) struct LineIndex<'a> {
    text: &'a str,
    line_starts: Vec<usize>,
}

impl<'a> LineIndex<'a> {
    pub(super) fn new(text: &'a str) -> Self {
        let line_starts = std::iter::once(0)
            .chain(text.match_indices('\n').map(|(idx, _)| idx + 1))
            .collect();
        LineIndex { text, line_starts }
    }

    pub(super) fn line_col(&self, offset: usize) -> (usize, usize) {
        let offset = offset.min(self.text.len());
        let line_idx = self.line_starts.partition_point(|&start| start <= offset) - 1;
        let start = self.line_starts[line_idx];
        let column = self
            .text
            .get(start..offset)
            .map_or(offset - start, |prefix| prefix.chars().count());
        (line_idx + 1, column + 1)
    }
}

/// Where each key and value of the document sits.
pub(super) struct SpanIndex {
    /// Start of the key (for table entries) or of the value (for array items), per path.
    starts: HashMap<Vec<Segment>, usize>,
}

impl SpanIndex {
    pub(super) fn new(document: &DeTable<'_>) -> Self {
        let mut index = SpanIndex {
            starts: HashMap::new(),
        };
        index.add_table(&mut Vec::new(), document);
        index
    }

    fn add_table(&mut self, path: &mut Vec<Segment>, table: &DeTable<'_>) {
        for (key, value) in table.iter() {
            path.push(Segment::Key(key.get_ref().to_string()));
            self.starts.insert(path.clone(), key.span().start);
            self.add_value(path, value);
            path.pop();
        }
    }

    fn add_value(&mut self, path: &mut Vec<Segment>, value: &Spanned<DeValue<'_>>) {
        match value.get_ref() {
            DeValue::Table(table) => self.add_table(path, table),
            DeValue::Array(items) => {
                for (idx, item) in items.iter().enumerate() {
                    path.push(Segment::Index(idx));
                    self.starts.insert(path.clone(), item.span().start);
                    self.add_value(path, item);
                    path.pop();
                }
            }
            _ => {}
        }
    }

    /// The offset of `path`, or of its nearest ancestor present in the file (0 for none).
    pub(super) fn offset_of(&self, path: &[Segment]) -> usize {
        (0..=path.len())
            .rev()
            .find_map(|len| self.starts.get(&path[..len]).copied())
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_col_counts_characters() {
        let index = LineIndex::new("a = 1\nτ = 2\n");
        assert_eq!(index.line_col(0), (1, 1));
        assert_eq!(index.line_col(6), (2, 1));
        // "τ" is two bytes: the byte after it is column 2.
        assert_eq!(index.line_col(8), (2, 2));
        assert_eq!(index.line_col(1000), (3, 1));
    }

    #[test]
    fn dotted_paths_round_trip() {
        let path = parse_dotted("env.domains[2]");
        assert_eq!(
            path,
            vec![
                Segment::Key("env".into()),
                Segment::Key("domains".into()),
                Segment::Index(2)
            ]
        );
        assert_eq!(dotted(&path), "env.domains[2]");
        assert_eq!(dotted(&[Segment::Key("a b".into())]), "\"a b\"");
    }
}
