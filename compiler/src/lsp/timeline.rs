//! Diagnostics of timeline and test files (docs/editors.md#timelines-and-tests):
//! what the simulator's timeline parser and `rulec test`'s expectation
//! reader report, each placed on the entry and key it names: every one.

use super::diagnostics::Problem;
use std::path::Path;

/// Every problem the parsers find in the timeline `text`
/// ([`crate::timeline::diagnostics`], without the rules).
pub fn problems(text: &str) -> Vec<Problem> {
    crate::timeline::diagnostics("", text, None)
        .iter()
        .map(|diagnostic| Problem::of(diagnostic, Path::new("")))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn problems_point_at_their_entry_and_key() {
        let text =
            "[[event]]\nat = \"0s\"\ntopic = \"a\"\n\n[[event]]\nat = \"1s\"\ntpoic = \"b\"\n";
        let found = problems(text);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(&text[found[0].span.clone()], "tpoic");
        assert_eq!(found[0].fix.as_ref().map(|f| f.1.as_str()), Some("topic"));

        let text = "[[event]]\nat = \"10 s\"\ntopic = \"a\"\n[[expect]]\nrlue = \"x\"\n";
        let found = problems(text);
        assert_eq!(found.len(), 2, "{found:?}");
        assert_eq!(&text[found[0].span.clone()], "rlue");
        assert_eq!(&text[found[1].span.clone()], "\"10 s\"");
        assert_eq!(found[1].fix.as_ref().map(|f| f.1.as_str()), Some("\"10s\""));

        let found = problems("[[event]\n");
        assert_eq!(found.len(), 1);
        assert!(found[0].message.starts_with("not valid TOML"), "{found:?}");
    }
}
