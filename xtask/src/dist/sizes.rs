//! The binary sizes docs/scooter-build.md states, checked by every `cargo
//! xtask dist` against what it built: the table after the marker
//! `<!-- sizes: checked by cargo xtask dist -->`, one row per target and
//! binary, `| armv7-unknown-linux-gnueabihf | ruled | 3.06 MB |` (MB:
//! 1,000,000 bytes). A figure more than [`TOLERANCE`] off is reported
//! with the line to write instead; the build itself does not fail.

use anyhow::{bail, Context, Result};
use std::path::Path;

/// The page holding the table, from the repository root.
pub(crate) const PAGE: &str = "docs/scooter-build.md";
const MARKER: &str = "<!-- sizes: checked by cargo xtask dist -->";
/// How far a stated figure may be from the built size (a fraction).
pub(crate) const TOLERANCE: f64 = 0.03;

/// One row: the target triple, the binary, its size in MB.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Stated {
    pub(crate) triple: String,
    pub(crate) binary: String,
    pub(crate) megabytes: f64,
}

/// The rows of the page's size table.
pub(crate) fn stated(page: &str) -> Result<Vec<Stated>> {
    let from = page
        .find(MARKER)
        .with_context(|| format!("{PAGE} has no `{MARKER}` before its size table"))?;
    let mut rows = Vec::new();
    for line in page[from + MARKER.len()..]
        .lines()
        .skip_while(|line| line.trim().is_empty())
        .take_while(|line| line.starts_with('|'))
    {
        let cells: Vec<&str> = line
            .trim_matches('|')
            .split('|')
            .map(|cell| cell.trim().trim_matches('`'))
            .collect();
        let [triple, binary, size] = cells[..] else {
            bail!("{PAGE}: a size row has three cells: {line}");
        };
        // The header and the `|---|` line.
        if triple == "target" || triple.starts_with('-') {
            continue;
        }
        let megabytes = size
            .strip_suffix(" MB")
            .and_then(|number| number.parse::<f64>().ok())
            .with_context(|| format!("{PAGE}: `{size}` is not `N.NN MB` in: {line}"))?;
        rows.push(Stated {
            triple: triple.to_string(),
            binary: binary.to_string(),
            megabytes,
        });
    }
    if rows.is_empty() {
        bail!("{PAGE}: the size table after `{MARKER}` has no rows");
    }
    Ok(rows)
}

/// What `dist` says about one built binary at `target/dist/<triple>/<binary>`
/// of `bytes` bytes, against the page's rows.
pub(crate) fn verdict(rows: &[Stated], built: &Path, bytes: u64) -> Option<String> {
    let binary = built.file_name()?.to_str()?;
    let triple = built.parent()?.file_name()?.to_str()?;
    let megabytes = bytes as f64 / 1e6;
    let Some(row) = rows
        .iter()
        .find(|row| row.triple == triple && row.binary == binary)
    else {
        return Some(format!(
            "{PAGE} states no size for {binary} on {triple} (built: {megabytes:.2} MB)"
        ));
    };
    let off = megabytes / row.megabytes - 1.0;
    if off.abs() <= TOLERANCE {
        return None;
    }
    Some(format!(
        "{PAGE} states {:.2} MB for {binary} on {triple}, built {megabytes:.2} MB ({:+.1} %): \
         update its row to `| {triple} | {binary} | {megabytes:.2} MB |`",
        row.megabytes,
        off * 100.0
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::invariants::repository_root;

    #[test]
    fn the_page_states_both_armv7_binaries() {
        let page = std::fs::read_to_string(repository_root().unwrap().join(PAGE)).unwrap();
        let rows = stated(&page).unwrap();
        for binary in super::super::BINARIES {
            assert!(
                rows.iter()
                    .any(|row| row.triple == "armv7-unknown-linux-gnueabihf"
                        && row.binary == *binary),
                "{rows:?}"
            );
        }
    }

    #[test]
    fn a_figure_off_by_more_than_the_tolerance_is_reported() {
        let page = format!(
            "{MARKER}\n\n| target | binary | size |\n|---|---|---|\n\
             | `armv7-unknown-linux-gnueabihf` | `ruled` | 2.58 MB |\n"
        );
        let rows = stated(&page).unwrap();
        let ruled = Path::new("target/dist/armv7-unknown-linux-gnueabihf/ruled");
        assert_eq!(verdict(&rows, ruled, 2_590_000), None);
        let said = verdict(&rows, ruled, 3_060_000).unwrap();
        assert!(
            said.contains("states 2.58 MB") && said.contains("built 3.06 MB"),
            "{said}"
        );
        assert!(
            said.contains("| armv7-unknown-linux-gnueabihf | ruled | 3.06 MB |"),
            "{said}"
        );
        let rulec = Path::new("target/dist/aarch64-unknown-linux-gnu/rulec");
        assert!(verdict(&rows, rulec, 1).unwrap().contains("states no size"));
    }

    #[test]
    fn a_table_without_rows_or_marker_is_an_error() {
        assert!(stated("no table here").is_err());
        assert!(stated(&format!("{MARKER}\n\nprose\n")).is_err());
        assert!(stated(&format!("{MARKER}\n| a | b | three MB |\n")).is_err());
    }
}
