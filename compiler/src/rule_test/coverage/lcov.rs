//! `--coverage-out FILE` (docs/rulec.md#coverage): the coverage in the
//! lcov tracefile format (geninfo(1)), one record per rule file, so that
//! CI coverage tools show rule files as they show code. A rule is a
//! function (`FN`, hit when it triggered); its `on`, its `when`, and each
//! step's table and `when` are lines (`DA`); each `when` is a block of two
//! branches (`BRDA`: branch 0 true, branch 1 false).

use super::{Coverage, Outcomes, RuleCoverage, RuleLines, StepCoverage, StepLines};
use std::collections::BTreeMap;

/// What one rule file's record holds.
#[derive(Default)]
struct Record {
    /// (line, name, runs), in file order.
    functions: Vec<(u32, String, u64)>,
    /// Line -> count; a line holding two parts (an inline step table and
    /// its `when`) shows the larger count.
    lines: BTreeMap<u32, u64>,
    /// (line, block) -> (true, false); `None`: never evaluated.
    branches: BTreeMap<(u32, u32), Option<(u64, u64)>>,
}

impl Record {
    fn line(&mut self, line: u32, count: u64) {
        let entry = self.lines.entry(line).or_default();
        *entry = (*entry).max(count);
    }

    fn when(&mut self, line: u32, outcomes: &Outcomes) {
        self.line(line, outcomes.evaluated());
        let block = (0..)
            .find(|block| !self.branches.contains_key(&(line, *block)))
            .unwrap_or_default();
        let taken = (outcomes.evaluated() > 0).then_some((outcomes.seen_true, outcomes.seen_false));
        self.branches.insert((line, block), taken);
    }

    fn rule(&mut self, rule: &RuleCoverage, lines: &RuleLines) {
        self.functions
            .push((lines.table, rule.name.clone(), rule.runs));
        self.line(lines.on, rule.matched);
        if let (Some(line), Some(when)) = (lines.when, &rule.when) {
            self.when(line, when);
        }
        for (step, lines) in rule.steps.iter().zip(&lines.steps) {
            self.step(step, lines);
        }
        for (step, lines) in rule.finally.iter().zip(&lines.finally) {
            self.step(step, lines);
        }
    }

    fn step(&mut self, step: &StepCoverage, lines: &StepLines) {
        self.line(lines.table, step.reached);
        if let (Some(line), Some(when)) = (lines.when, &step.when) {
            self.when(line, when);
        }
    }

    fn write(&self, file: &str, out: &mut String) {
        out.push_str(&format!("TN:\nSF:{}\n", one_line(file)));
        for (line, name, _) in &self.functions {
            out.push_str(&format!("FN:{line},{}\n", one_line(name)));
        }
        for (_, name, runs) in &self.functions {
            out.push_str(&format!("FNDA:{runs},{}\n", one_line(name)));
        }
        let hit = self.functions.iter().filter(|f| f.2 > 0).count();
        out.push_str(&format!("FNF:{}\nFNH:{hit}\n", self.functions.len()));
        let mut branches_hit = 0;
        for (&(line, block), taken) in &self.branches {
            for (branch, count) in [taken.map(|t| t.0), taken.map(|t| t.1)].iter().enumerate() {
                // `-`: the `when` was never evaluated.
                let shown = count.map_or_else(|| "-".to_string(), |n| n.to_string());
                branches_hit += usize::from(count.is_some_and(|n| n > 0));
                out.push_str(&format!("BRDA:{line},{block},{branch},{shown}\n"));
            }
        }
        let found = 2 * self.branches.len();
        out.push_str(&format!("BRF:{found}\nBRH:{branches_hit}\n"));
        for (line, count) in &self.lines {
            out.push_str(&format!("DA:{line},{count}\n"));
        }
        let hit = self.lines.values().filter(|&&n| n > 0).count();
        out.push_str(&format!(
            "LF:{}\nLH:{hit}\nend_of_record\n",
            self.lines.len()
        ));
    }
}

/// A name or path on one line of the file: a control character (a rule
/// name may hold one, with a warning) would end the field.
fn one_line(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

/// The lcov tracefile of every rules directory's coverage: one record per
/// rule file, in the order the rules are in. Rules without lines (a
/// bundle's) are not in it.
pub fn render(sets: &[Coverage]) -> String {
    let mut files: Vec<(&str, Record)> = Vec::new();
    for rule in sets.iter().flat_map(|set| &set.rules) {
        let Some(lines) = &rule.lines else {
            continue;
        };
        let index = match files.iter().position(|(file, _)| *file == lines.file) {
            Some(index) => index,
            None => {
                files.push((&lines.file, Record::default()));
                files.len() - 1
            }
        };
        files[index].1.rule(rule, lines);
    }
    let mut out = String::new();
    for (file, record) in &files {
        record.write(file, &mut out);
    }
    out
}
