//! The documents as tests read them: the repository's Markdown files, their
//! tables (the references kept complete: `docs/configuration.md`,
//! `docs/metrics.md`), headings (GitHub's anchors) and links.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The repository's root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the repository's root")
}

/// A file of the repository, by its path from the root.
pub fn read(path: &str) -> String {
    let full = repo().join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()))
}

/// The rows of every Markdown table in `text` whose header row starts with
/// `header` (e.g. `"| key | default |"`), as trimmed cells; the header and
/// the `|---|` row left out.
pub fn table_rows(text: &str, header: &str) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        if !line.starts_with(header) {
            continue;
        }
        lines.next(); // |---|---|
        while let Some(row) = lines.next_if(|l| l.starts_with('|')) {
            rows.push(cells(row));
        }
    }
    rows
}

/// A table row's cells, trimmed; `\|` inside a cell is a `|`.
fn cells(row: &str) -> Vec<String> {
    let row = row.trim().trim_start_matches('|').trim_end_matches('|');
    let mut out = vec![String::new()];
    let mut chars = row.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'|') => {
                out.last_mut().unwrap().push('|');
                chars.next();
            }
            '|' => out.push(String::new()),
            c => out.last_mut().unwrap().push(c),
        }
    }
    out.iter().map(|c| c.trim().to_string()).collect()
}

/// The `code spans` of a cell, in order.
pub fn code_spans(cell: &str) -> Vec<String> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

/// One metric family as `docs/metrics.md` documents it.
#[derive(Debug, Clone)]
pub struct MetricEntry {
    /// The family's name, or a prefix ending in `*` (`process_*`).
    pub name: String,
    /// `counter`, `gauge`, `histogram`; for a prefix, each type its
    /// families may have.
    pub types: BTreeSet<String>,
    /// Label names (none: empty).
    pub labels: BTreeSet<String>,
    pub meaning: String,
}

impl MetricEntry {
    /// Whether this entry documents `family`.
    pub fn covers(&self, family: &str) -> bool {
        match self.name.strip_suffix('*') {
            Some(prefix) => family.starts_with(prefix),
            None => self.name == family,
        }
    }
}

/// The families `docs/metrics.md` documents: its table `| family | type |
/// labels | meaning |`.
pub fn metric_entries() -> Vec<MetricEntry> {
    let rows = table_rows(
        &read("docs/metrics.md"),
        "| family | type | labels | meaning |",
    );
    assert!(
        rows.len() >= 12,
        "docs/metrics.md: no table `| family | type | labels | meaning |`"
    );
    rows.into_iter()
        .map(|r| {
            assert_eq!(r.len(), 4, "docs/metrics.md, a row of 4 cells: {r:?}");
            let names = code_spans(&r[0]);
            assert_eq!(names.len(), 1, "docs/metrics.md: one family a row: {r:?}");
            MetricEntry {
                name: names[0].clone(),
                types: r[1].split(',').map(|t| t.trim().to_string()).collect(),
                labels: code_spans(&r[2]).into_iter().collect(),
                meaning: r[3].clone(),
            }
        })
        .collect()
}

/// The lines of a Markdown text outside its fenced code blocks.
fn prose_lines(text: &str) -> impl Iterator<Item = &str> {
    let mut in_code = false;
    text.lines().filter(move |line| {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
            return false;
        }
        !in_code
    })
}

/// The anchors GitHub gives the headings of a Markdown text: lower case,
/// punctuation but `-` and `_` dropped, spaces as `-`; a repeated one
/// numbered (`-1`, `-2`, …). Headings inside code blocks are none.
pub fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    for line in prose_lines(text).filter(|l| l.starts_with('#')) {
        let title = line.trim_start_matches('#').trim();
        let slug: String = title
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let mut anchor = slug.clone();
        let mut n = 0;
        while seen.contains(&anchor) {
            n += 1;
            anchor = format!("{slug}-{n}");
        }
        seen.insert(anchor);
    }
    seen
}

/// The targets of a Markdown text's inline links `[text](target)`, outside
/// code blocks and code spans.
pub fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in prose_lines(text) {
        // Code spans hold examples, not links.
        let prose: String = line.split('`').step_by(2).collect::<Vec<_>>().join(" ");
        let mut rest = prose.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            match after.find(')') {
                Some(end) => {
                    out.push(after[..end].to_string());
                    rest = &after[end..];
                }
                None => break,
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anchors_are_githubs() {
        let a = anchors(
            "# A title\n## Metrics and alerts\n```sh\n# not a heading\n```\n## Metrics and alerts\n### `once`: exit codes\n",
        );
        let want: BTreeSet<String> = [
            "a-title",
            "metrics-and-alerts",
            "metrics-and-alerts-1",
            "once-exit-codes",
        ]
        .map(String::from)
        .into();
        assert_eq!(a, want);
    }

    #[test]
    fn links_and_cells_are_read_as_markdown_has_them() {
        let l =
            links("see [ops](docs/operations.md#scale) and `[x](no.md)`\n```\n[y](no.md)\n```\n");
        assert_eq!(l, vec!["docs/operations.md#scale"]);
        assert_eq!(cells("| `a` | b \\| c | d |"), vec!["`a`", "b | c", "d"]);
    }
}
