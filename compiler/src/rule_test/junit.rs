//! `rulec test --junit FILE` (docs/rulec.md#rulec-test): the results as JUnit
//! XML, the report format CI systems read: one `<testcase>` per test file,
//! a `<failure>` (an expectation not met) or an `<error>` (the test could
//! not run) with the same text the terminal shows.

use super::{failure_text, Outcome, TestResult};

/// The whole document.
pub fn render(results: &[TestResult]) -> String {
    let failures = results
        .iter()
        .filter(|r| matches!(r.outcome, Outcome::Fail { .. }))
        .count();
    let errors = results
        .iter()
        .filter(|r| matches!(r.outcome, Outcome::Error { .. }))
        .count();
    let mut xml = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    xml.push_str(&format!(
        "<testsuites name=\"rulec test\" tests=\"{}\" failures=\"{failures}\" errors=\"{errors}\">\n",
        results.len()
    ));
    xml.push_str(&format!(
        "  <testsuite name=\"rulec test\" tests=\"{}\" failures=\"{failures}\" errors=\"{errors}\">\n",
        results.len()
    ));
    for result in results {
        let name = escape(&result.file);
        xml.push_str(&format!(
            "    <testcase classname=\"rulec.test\" name=\"{name}\" file=\"{name}\""
        ));
        match &result.outcome {
            Outcome::Pass => xml.push_str("/>\n"),
            Outcome::Fail { problem, .. } => xml.push_str(&format!(
                ">\n      <failure message=\"{}\">{}</failure>\n    </testcase>\n",
                escape(problem),
                escape(&failure_text(result))
            )),
            Outcome::Error { message } => xml.push_str(&format!(
                ">\n      <error message=\"{}\">{}</error>\n    </testcase>\n",
                escape(message),
                escape(&failure_text(result))
            )),
        }
    }
    xml.push_str("  </testsuite>\n</testsuites>\n");
    xml
}

/// Text for an attribute or element: the five XML specials escaped, and
/// control characters XML 1.0 cannot carry replaced.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\n' | '\t' | '\r' => out.push(c),
            c if c.is_control() => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specials_and_controls_are_escaped() {
        assert_eq!(
            escape("a<b>&\"'\u{1}\n"),
            "a&lt;b&gt;&amp;&quot;&apos;\u{fffd}\n"
        );
    }
}
