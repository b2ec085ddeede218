//! The unified diff `rulec fix --dry-run` prints, made from the fix's own
//! replacements: the lines outside them are known to be equal, so only the
//! lines a replacement touches are compared. A diff of the two whole texts
//! (Myers) costs the file's lines times the changed ones, quadratic when
//! every rule of a large file has a `when` to rewrite; this is linear in
//! the file plus each touched block compared alone. The text is what
//! `similar`'s unified diff with three lines of context prints.

use crate::span::Lines;
use similar::{capture_diff_slices, group_diff_ops, Algorithm, DiffOp};
use std::ops::Range;

/// Lines of context around each change.
const CONTEXT: usize = 3;

/// One replacement: the bytes it replaced in the old text and the bytes it
/// wrote in the new one.
pub(super) type Change = (Range<usize>, Range<usize>);

/// A text's lines, each with its line break, as `similar` splits them.
fn lines(text: &str) -> Vec<&str> {
    text.split_inclusive('\n').collect()
}

/// The lines `range` touches (at least the one it starts on).
fn touched(lines: &Lines<'_>, range: &Range<usize>) -> Range<usize> {
    let first = lines.line_of(range.start);
    let last = lines.line_of(range.end.saturating_sub(1).max(range.start));
    first..last + 1
}

/// The blocks of old and new lines the changes touch, merged where they
/// share a line, in order.
fn blocks(old: &str, new: &str, changes: &[Change]) -> Vec<(Range<usize>, Range<usize>)> {
    let (old_lines, new_lines) = (Lines::new(old), Lines::new(new));
    let mut blocks: Vec<(Range<usize>, Range<usize>)> = Vec::new();
    for (old_range, new_range) in changes {
        let (o, n) = (
            touched(&old_lines, old_range),
            touched(&new_lines, new_range),
        );
        match blocks.last_mut() {
            Some((last_o, last_n)) if o.start < last_o.end || n.start < last_n.end => {
                last_o.end = last_o.end.max(o.end);
                last_n.end = last_n.end.max(n.end);
            }
            _ => blocks.push((o, n)),
        }
    }
    blocks
}

/// The diff's operations over all lines: equal runs between the blocks,
/// each block compared alone. `None` if the changes do not describe `new`
/// as `old` with them applied (the gaps between blocks differ).
fn ops(old: &[&str], new: &[&str], blocks: &[(Range<usize>, Range<usize>)]) -> Option<Vec<DiffOp>> {
    let mut ops = Vec::new();
    let (mut o, mut n) = (0, 0);
    let equal = |ops: &mut Vec<DiffOp>, o: usize, n: usize, len: usize| {
        if len > 0 {
            ops.push(DiffOp::Equal {
                old_index: o,
                new_index: n,
                len,
            });
        }
    };
    for (old_block, new_block) in blocks {
        let gap = old_block.start.checked_sub(o)?;
        if new_block.start.checked_sub(n)? != gap {
            return None;
        }
        equal(&mut ops, o, n, gap);
        let inner = capture_diff_slices(
            Algorithm::Myers,
            old.get(old_block.clone())?,
            new.get(new_block.clone())?,
        );
        ops.extend(
            inner
                .into_iter()
                .map(|op| shifted(op, old_block.start, new_block.start)),
        );
        (o, n) = (old_block.end, new_block.end);
    }
    if old.len().checked_sub(o)? != new.len().checked_sub(n)? {
        return None;
    }
    equal(&mut ops, o, n, old.len() - o);
    Some(ops)
}

/// `op` of a block, in the whole texts' line numbers.
fn shifted(op: DiffOp, old_at: usize, new_at: usize) -> DiffOp {
    match op {
        DiffOp::Equal {
            old_index,
            new_index,
            len,
        } => DiffOp::Equal {
            old_index: old_index + old_at,
            new_index: new_index + new_at,
            len,
        },
        DiffOp::Delete {
            old_index,
            old_len,
            new_index,
        } => DiffOp::Delete {
            old_index: old_index + old_at,
            old_len,
            new_index: new_index + new_at,
        },
        DiffOp::Insert {
            old_index,
            new_index,
            new_len,
        } => DiffOp::Insert {
            old_index: old_index + old_at,
            new_index: new_index + new_at,
            new_len,
        },
        DiffOp::Replace {
            old_index,
            old_len,
            new_index,
            new_len,
        } => DiffOp::Replace {
            old_index: old_index + old_at,
            old_len,
            new_index: new_index + new_at,
            new_len,
        },
    }
}

/// One line of a hunk: its sign, the line, and the note of a missing
/// final line break.
fn push_line(out: &mut String, sign: char, line: &str) {
    out.push(sign);
    out.push_str(line);
    if !line.ends_with('\n') {
        out.push_str("\n\\ No newline at end of file\n");
    }
}

/// The unified diff from `old` to `new`, both headers `name`; empty when
/// they are equal. `changes` are the replacements that made `new`, in
/// order and not overlapping.
pub(super) fn unified_diff(old: &str, new: &str, changes: &[Change], name: &str) -> String {
    let (old_lines, new_lines) = (lines(old), lines(new));
    let Some(ops) = ops(&old_lines, &new_lines, &blocks(old, new, changes)) else {
        // Not reached: the changes made `new`. The whole-text diff is
        // still right, only slower.
        return similar::TextDiff::from_lines(old, new)
            .unified_diff()
            .header(name, name)
            .to_string();
    };
    let mut out = String::new();
    for hunk in group_diff_ops(ops, CONTEXT) {
        if hunk.is_empty() || hunk.iter().all(|op| matches!(op, DiffOp::Equal { .. })) {
            continue;
        }
        if out.is_empty() {
            out.push_str(&format!("--- {name}\n+++ {name}\n"));
        }
        out.push_str(&format!(
            "{}\n",
            similar::udiff::UnifiedHunkHeader::new(&hunk)
        ));
        for op in &hunk {
            for line in &old_lines[op.old_range()] {
                let sign = if matches!(op, DiffOp::Equal { .. }) {
                    ' '
                } else {
                    '-'
                };
                push_line(&mut out, sign, line);
            }
            if !matches!(op, DiffOp::Equal { .. }) {
                for line in &new_lines[op.new_range()] {
                    push_line(&mut out, '+', line);
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `old` with each `(range, text)` applied, and the changes.
    fn apply(old: &str, edits: &[(Range<usize>, &str)]) -> (String, Vec<Change>) {
        let (mut new, mut changes, mut at) = (String::new(), Vec::new(), 0);
        for (range, text) in edits {
            new.push_str(&old[at..range.start]);
            let start = new.len();
            new.push_str(text);
            changes.push((range.clone(), start..new.len()));
            at = range.end;
        }
        new.push_str(&old[at..]);
        (new, changes)
    }

    fn whole_text_diff(old: &str, new: &str) -> String {
        similar::TextDiff::from_lines(old, new)
            .unified_diff()
            .header("f", "f")
            .to_string()
    }

    #[test]
    fn the_diff_is_the_whole_text_diff() {
        let old: String = (0..40)
            .map(|i| format!("line {i}\nwhen = 'x{i}'\n"))
            .collect();
        let at = |needle: &str| {
            let start = old.find(needle).unwrap();
            start..start + needle.len()
        };
        let x7 = at("'x7'");
        let cases: Vec<Vec<(Range<usize>, &str)>> = vec![
            vec![(at("'x3'"), "\"x3\"")],
            vec![(at("'x3'"), "\"x3\""), (at("'x5'"), "\"x5\"")],
            vec![
                (at("'x1'"), "\"a\nb\""),
                (at("'x20'"), "\"x\""),
                (at("'x39'"), "y"),
            ],
            // Two replacements on one line, and one that removes a line break.
            vec![
                (x7.start..x7.start + 1, "\""),
                (x7.end - 1..x7.end, "\""),
                (at("'x9'\nline 10"), "z"),
            ],
        ];
        for edits in cases {
            let (new, changes) = apply(&old, &edits);
            assert_eq!(
                unified_diff(&old, &new, &changes, "f"),
                whole_text_diff(&old, &new)
            );
        }
        let (new, changes) = apply("a\nb = 'c'", &[(4..9, "\"c\"")]);
        assert_eq!(
            unified_diff("a\nb = 'c'", &new, &changes, "f"),
            whole_text_diff("a\nb = 'c'", &new)
        );
        assert_eq!(unified_diff(&old, &old, &[], "f"), "");
    }
}
