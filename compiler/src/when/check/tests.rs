use super::*;

fn ok(text: &str) -> CheckedWhen {
    check(text).unwrap_or_else(|p| panic!("{text}: {p:#?}"))
}

/// The single problem of `text`, with the bytes its span covers.
fn one(text: &str) -> (WhenProblem, &str) {
    let problems = match check(text) {
        Ok(_) => panic!("{text}: accepted"),
        Err(p) => p,
    };
    assert_eq!(problems.len(), 1, "{text}: {problems:#?}");
    let p = problems
        .into_iter()
        .next()
        .unwrap_or_else(|| unreachable!());
    let at = &text[p.span.clone()];
    (p, at)
}

#[test]
fn accepts_the_documented_language() {
    for text in [
        r#"to == "parked""#,
        r#"topic == "alarm.triggered" && src != "" || !(from == "a")"#,
        "data.level >= 2",
        "data.battery.charge < 20.5 && data.battery.charge > -1",
        r#"state("vehicle", "state") == "parked""#,
        r#"str::starts_with(topic, "button.") && str::ends_with(to, "hold")"#,
        r#"str::contains(str::to_lowercase(str::trim(src)), "x")"#,
        "len(topic) > 3",
        "min(1, 2, data.x) < max(2.5, 3)",
        "if(data.flag, 1, 2) == 1",
        "floor(data.x) == 2.0 && ceil(1.2) > round(0.5) && math::abs(-3) == 3",
        "2 ^ 10 > 1000 && 7 % 3 == 1 && 7 / 2 == 3",
        "data.enabled",
        "true",
        "(((true)))",
        "data.a + data.b == data.c",
        r#"topic + "x" == "ax""#,
        "1e-3 < 0.01",
        "1 == 1 // a comment",
    ] {
        ok(text);
    }
}

#[test]
fn records_state_pairs_once_in_order() {
    let checked =
        ok(r#"state("b", "f") == "1" && state("a", "g") == "2" || state("b", "f") == "3""#);
    let names: Vec<(&str, &str)> = checked
        .state_pairs
        .iter()
        .map(|p| (p.hash.as_str(), p.field.as_str()))
        .collect();
    assert_eq!(names, vec![("b", "f"), ("a", "g")]);
}

#[test]
fn always_false_is_flagged() {
    assert!(ok("false").is_always_false);
    assert!(ok(" (false) ").is_always_false);
    assert!(!ok("true").is_always_false);
    // Reads no event data and is false: just as dead as the literal.
    assert!(ok("false && true").is_always_false);
    assert!(ok(r#""a" == "b""#).is_always_false);
    assert!(ok("2 ^ 3 ^ 2 == 512.0").is_always_false);
    assert!(ok("!(1 < 2)").is_always_false);
    assert!(!ok("1 < 2").is_always_false);
    // Anything that reads the event or the store may be true.
    assert!(!ok(r#"state("a", "b") == "c""#).is_always_false);
    assert!(!ok("data.x == 1").is_always_false);
}

#[test]
fn comparing_data_with_the_empty_string_warns() {
    let warnings = |text: &str| -> Vec<(&'static str, String)> {
        ok(text)
            .warnings
            .into_iter()
            .map(|w| (w.code.as_str(), text[w.span].to_string()))
            .collect()
    };
    assert_eq!(
        warnings(r#"to == "x" && data.a.b == """#),
        [(
            "rulec::when::empty-string-data",
            r#"data.a.b == """#.to_string()
        )]
    );
    assert_eq!(warnings(r#""" != data.a"#).len(), 1);
    // Fields are strings, `""` when absent: comparing them with `""` is fine.
    assert!(warnings(r#"to == """#).is_empty());
    assert!(warnings(r#"data.a == " ""#).is_empty());
    assert!(warnings(r#"str::trim(data.a) == """#).is_empty());
}

#[test]
fn constant_string_tests_evaluate_like_the_vm() {
    // Our string tests are not evalexpr built-ins: a constant call to one
    // must be evaluated with them registered, not reported as failing.
    assert!(!ok(r#"str::starts_with("ab", "a")"#).is_always_false);
    assert!(ok(r#"str::starts_with("ab", "b")"#).is_always_false);
    assert!(ok(r#"str::ends_with("ab", "a")"#).is_always_false);
    assert!(!ok(r#"str::contains("abc", "b") && to == "x""#).is_always_false);
    assert!(ok(r#"!str::contains("abc", "b")"#).is_always_false);
}

#[test]
fn unknown_name_points_at_it_with_a_suggestion() {
    let (p, at) = one(r#"topic == "a" && tpoic == "b""#);
    assert_eq!(p.code, "rulec::when::unknown-name");
    assert_eq!(at, "tpoic");
    assert_eq!(p.help.as_deref(), Some("did you mean `topic`?"));

    let (p, at) = one("  speed > 3");
    assert_eq!(at, "speed");
    assert!(p
        .help
        .unwrap_or_default()
        .starts_with("for a key of the event's data, write `data.speed`"));
    let (p, _) = one("x::y > 3");
    assert!(p.help.unwrap_or_default().contains("data.KEY"));

    let (p, _) = one("dat.level > 1");
    assert_eq!(p.help.as_deref(), Some("did you mean `data.level`?"));
    let (p, _) = one("TRUE");
    assert_eq!(p.help.as_deref(), Some("did you mean `true`?"));
    let (p, _) = one("data");
    assert!(p.help.unwrap_or_default().contains("data.KEY"));

    let (_, at) = one("data.a..b == 1");
    assert_eq!(at, "data.a..b");
}

#[test]
fn unknown_and_unsupported_functions() {
    let (p, at) = one(r#"str::startswith(topic, "a")"#);
    assert_eq!(p.code, "rulec::when::unknown-function");
    assert_eq!(at, "str::startswith");
    assert_eq!(p.help.as_deref(), Some("did you mean `str::starts_with`?"));

    let (p, at) = one("math::sqrt(4) > 1");
    assert_eq!(p.code, "rulec::when::unsupported-function");
    assert_eq!(at, "math::sqrt");
}

#[test]
fn state_needs_two_string_literals() {
    let (p, at) = one(r#"state("a", topic) == "x""#);
    assert_eq!(p.code, "rulec::when::arguments");
    assert_eq!(at, "topic");
    let (p, at) = one(r#"state("a") == "x""#);
    assert_eq!(p.code, "rulec::when::arguments");
    assert_eq!(at, r#"state("a")"#);
}

#[test]
fn targeted_help_for_other_languages() {
    let (p, at) = one("to == 'parked'");
    assert_eq!(p.code, "rulec::when::single-quotes");
    assert_eq!(at, "'parked'");
    assert!(p
        .help
        .unwrap_or_default()
        .contains(r#"when = 'to == "parked"'"#));

    let (p, at) = one("to == 'two words'");
    assert_eq!(p.code, "rulec::when::single-quotes");
    assert_eq!(at, "'two words'");
    // The help quotes what was written, not a stock example.
    let help = p.help.unwrap_or_default();
    assert!(
        help.starts_with(r#"write "two words", not 'two words'"#),
        "{help}"
    );
    assert!(!help.contains("parked"), "{help}");

    let problems = check(r#"to == "a" and not from == "b""#).unwrap_err();
    let found: Vec<(&str, Option<&str>)> = problems
        .iter()
        .map(|p| (p.code.as_str(), p.help.as_deref()))
        .collect();
    assert_eq!(
        found,
        vec![
            (
                "rulec::when::word-operator",
                Some("`when` uses `&&`, `||` and `!`: write `&&`")
            ),
            (
                "rulec::when::word-operator",
                Some(
                    "`when` uses `&&`, `||` and `!`: write `!(...)` around the condition, \
                     e.g. `!(from == \"driving\")`, or use `!=`"
                )
            ),
        ]
    );
    let text = r#"to == "a" and not from == "b""#;
    assert_eq!(&text[problems[0].span.clone()], "and");
    assert_eq!(&text[problems[1].span.clone()], "not");

    let (p, at) = one(r#"a & b"#);
    assert_eq!(p.code, "rulec::when::syntax");
    assert_eq!(at, "&");
}

#[test]
fn assignment_chains_and_tuples_are_rejected() {
    let (p, at) = one(r#"to = "parked""#);
    assert_eq!((p.code.as_str(), at), ("rulec::when::assignment", "="));
    assert_eq!(p.help.as_deref(), Some("to compare, write `==`"));
    let (p, at) = one("true; false");
    assert_eq!((p.code.as_str(), at), ("rulec::when::chain", ";"));
    let (p, at) = one("(1, 2) == 3");
    assert_eq!((p.code.as_str(), at), ("rulec::when::tuple", "1, 2"));
}

#[test]
fn type_errors_point_at_the_fault() {
    let (p, at) = one(r#"topic + 1 == "a1""#);
    assert_eq!((p.code.as_str(), at), ("rulec::when::type-mismatch", "+"));

    let (p, at) = one(r#"to == "a" && len(to)"#);
    assert_eq!(
        (p.code.as_str(), at),
        ("rulec::when::type-mismatch", "len(to)")
    );

    let (p, at) = one(r#"1 == "1""#);
    assert_eq!(
        (p.code.as_str(), at),
        ("rulec::when::literal-comparison", r#"1 == "1""#)
    );
    let (p, _) = one("1 == 1.0");
    assert_eq!(p.code, "rulec::when::literal-comparison");
    let (p, at) = one("-1 != (2.5)");
    assert_eq!(
        (p.code.as_str(), at),
        ("rulec::when::literal-comparison", "-1 != (2.5)")
    );

    let (p, at) = one("floor(data.x) == 2");
    assert_eq!((p.code.as_str(), at), ("rulec::when::type-mismatch", "=="));
    assert!(p.help.unwrap_or_default().contains("1 == 1.0"));

    let (p, at) = one(r#"topic < 3"#);
    assert_eq!((p.code.as_str(), at), ("rulec::when::type-mismatch", "<"));

    let (p, at) = one(r#"!topic"#);
    assert_eq!(
        (p.code.as_str(), at),
        ("rulec::when::type-mismatch", "topic")
    );

    let (p, at) = one(r#"str::contains(topic, 3)"#);
    assert_eq!((p.code.as_str(), at), ("rulec::when::type-mismatch", "3"));

    let (p, at) = one(r#"min(1) < 2"#);
    assert_eq!((p.code.as_str(), at), ("rulec::when::arguments", "min(1)"));
    assert_eq!(p.help.as_deref(), Some("write min(a, b, ...)"));
    let (p, _) = one(r#"str::starts_with(topic)"#);
    assert_eq!(
        p.help.as_deref(),
        Some("write str::starts_with(text, prefix)")
    );
}

#[test]
fn result_must_be_boolean() {
    let (p, at) = one("  data.x + 1 ");
    assert_eq!(
        (p.code.as_str(), at),
        ("rulec::when::not-boolean", "data.x + 1")
    );
    let (p, _) = one(r#""parked""#);
    assert_eq!(p.code, "rulec::when::not-boolean");
    let (p, _) = one("data.a + data.b");
    assert_eq!(
        p.message,
        "`when` must be a boolean, but this is a number or string"
    );
    let (p, at) = one("data.a + data.b && true");
    assert_eq!(
        (p.code.as_str(), at),
        ("rulec::when::type-mismatch", "data.a + data.b")
    );
    let (p, at) = one("data.a + data.b == false");
    assert_eq!((p.code.as_str(), at), ("rulec::when::type-mismatch", "=="));
    ok(r#"data.a + data.b == "xy" && len(data.a + data.b) > 1 && data.a + data.b < 3"#);
}

#[test]
fn reports_every_problem() {
    let text = r#"tpoic == "a" && foo(1) && src + 1 == 2"#;
    let problems = check(text).unwrap_err();
    let at: Vec<&str> = problems.iter().map(|p| &text[p.span.clone()]).collect();
    assert_eq!(at, vec!["tpoic", "foo", "+"]);
}

#[test]
fn parse_errors_have_spans() {
    let (p, at) = one("(to == \"a\"");
    assert_eq!((p.code.as_str(), at), ("rulec::when::syntax", "("));
    let (_, at) = one("to == \"a\")");
    assert_eq!(at, ")");
    let (p, at) = one(r#"to == "a" "b""#);
    assert_eq!((p.code.as_str(), at), ("rulec::when::syntax", r#""a" "b""#));
    let (p, at) = one(r#"to == "abc"#);
    assert_eq!((p.code.as_str(), at), ("rulec::when::syntax", r#""abc"#));
    let (p, _) = one("   ");
    assert_eq!(p.code, "rulec::when::empty");
}

#[test]
fn spans_survive_multibyte_text() {
    let (_, at) = one(r#"to == "ünïcødé" && tö == "x""#);
    assert_eq!(at, "tö");
}

/// Token soup: `check` never panics, and every span lies inside the text on
/// character boundaries (the validator slices the file with it).
#[test]
fn never_panics_and_spans_are_in_bounds() {
    const PIECES: &[&str] = &[
        "topic",
        "data.a",
        "data.",
        "state",
        "(",
        ")",
        "\"",
        "\"ü\"",
        "'",
        ",",
        ";",
        "=",
        "==",
        "!",
        "&",
        "&&",
        "||",
        "+",
        "-",
        "*",
        "/",
        "^",
        "%",
        "<",
        ">=",
        "1",
        "2.5",
        "1e",
        "true",
        "and",
        "len",
        "min",
        "if",
        "str::trim",
        "/*",
        "*/",
        "//",
        "\\",
        " ",
        "ß",
        "\n",
        "0x",
    ];
    // RULES_FUZZ_SEED / RULES_FUZZ_SCALE explore further (docs/fuzzing.md).
    let fuzz = test_kit::fuzz::Fuzz::from_env(
        "when::check::never_panics_and_spans_are_in_bounds",
        0x1234_5678,
    )
    .unwrap();
    let mut rng = test_kit::fuzz::Rng::new(fuzz.seed());
    let mut next = move || rng.next_u64();
    for _ in 0..fuzz.cases(20_000) {
        let len = (next() % 9) as usize;
        let text: String = (0..len)
            .map(|_| PIECES[(next() % PIECES.len() as u64) as usize])
            .collect();
        if let Err(problems) = check(&text) {
            assert!(!problems.is_empty(), "{text:?}: error without problems");
            for p in problems {
                assert!(
                    p.span.start <= p.span.end
                        && p.span.end <= text.len()
                        && text.is_char_boundary(p.span.start)
                        && text.is_char_boundary(p.span.end),
                    "{text:?}: bad span {:?} for {}",
                    p.span,
                    p.message
                );
            }
        }
    }
}

#[test]
fn missing_operands_point_at_the_operator() {
    for (text, op, says) in [
        ("data.x >=", ">=", "missing an operand"),
        ("1 + ", "+", "missing an operand"),
        ("true && !", "!", "missing an operand"),
        (r#"== to "x""#, "==", "has no left operand"),
        ("(< 1 2)", "<", "has no left operand"),
        (r#"to "x" == "y""#, "to", "missing operator after `to`"),
    ] {
        let problems = check(text).unwrap_err();
        let at: Vec<(&str, &str)> = problems
            .iter()
            .map(|p| (&text[p.span.clone()], p.message.as_str()))
            .collect();
        assert!(
            at.iter()
                .any(|(span, message)| *span == op && message.contains(says)),
            "{text}: {at:?}"
        );
    }
}

#[test]
fn accidental_evalexpr_forms_are_rejected() {
    for (text, at_want) in [
        ("true()", "("),
        ("(1 == 1)()", "("),
        ("1 < 2.5()", "()"),
        ("== 1 2", "=="),
    ] {
        let problems = check(text).unwrap_err();
        let at: Vec<&str> = problems.iter().map(|p| &text[p.span.clone()]).collect();
        assert_eq!(at, vec![at_want], "{text}: {problems:?}");
    }
}

/// The deepest trees the limit allows check and lower fine on a test
/// thread's small stack; one token more is an error, not a crash.
#[test]
fn size_limit_keeps_recursion_bounded() {
    let n = MAX_TOKENS / 2 - 1;
    let deep_parens = format!("{}true{}", "(".repeat(n), ")".repeat(n));
    let deep_not = format!("{}true", "!".repeat(MAX_TOKENS - 1));
    let long_chain = format!("1{} == 1", " + 1".repeat(MAX_TOKENS / 2 - 2));
    let right_nested = format!(
        "{}1{} == 1.0",
        "1 ^ (".repeat(n / 2 - 2),
        ")".repeat(n / 2 - 2)
    );
    for text in [&deep_parens, &deep_not, &long_chain, &right_nested] {
        let checked = ok(text);
        let mut pool = crate::when::ConstPool::new();
        let program = crate::when::lower(&checked, &mut pool);
        assert!(program.ops.len() <= MAX_TOKENS);
    }
    let too_long = format!("{}true", "!".repeat(MAX_TOKENS));
    let (p, _) = one(&too_long);
    assert_eq!(p.code, "rulec::when::too-long");
}

#[test]
fn a_bare_word_compared_with_a_string_gets_quotes_first() {
    for text in [
        "to == parked",
        "parked != from",
        r#"state("vehicle", "state") == parked"#,
        r#"(parked) == "x""#,
    ] {
        let (p, at) = one(text);
        assert_eq!(
            (p.code.as_str(), at),
            ("rulec::when::unknown-name", "parked"),
            "{text}"
        );
        let help = p.help.unwrap_or_default();
        assert!(
            help.starts_with(
                r#"to compare with the text `parked`, put it in double quotes: "parked""#
            ),
            "{text}: {help}"
        );
        assert!(help.contains("`data.parked`"), "{text}: {help}");
    }
    // An argument of a string test is text too.
    let (p, at) = one("str::contains(topic, alarm)");
    assert_eq!(at, "alarm");
    assert!(p
        .help
        .unwrap_or_default()
        .starts_with(r#"to use the text `alarm`, put it in double quotes: "alarm""#));
    // Not next to a string: the data hint alone.
    for text in ["parked", "parked > 3", "len(topic) == parked"] {
        let problems = check(text).unwrap_err();
        let help = problems[0].help.clone().unwrap_or_default();
        assert!(
            help.starts_with("for a key of the event's data, write `data.parked`"),
            "{text}: {help}"
        );
    }
    // A close field name keeps its "did you mean".
    let (p, _) = one(r#"tpoic == "alarm""#);
    assert_eq!(p.help.as_deref(), Some("did you mean `topic`?"));
}

#[test]
fn helps_fit_the_problem() {
    let (p, _) = one("data.x + 1");
    assert_eq!(p.help.as_deref(), Some("compare it, for example `... > 0`"));
    let (p, _) = one("topic");
    assert_eq!(
        p.help.as_deref(),
        Some(r#"compare it, for example `... == "value"`"#)
    );
    let (p, _) = one(r#"1 == "1""#);
    assert!(p.help.unwrap_or_default().contains("strings and numbers"));
    let (p, _) = one(r#"to == "a" &&"#);
    assert_eq!(
        p.help.as_deref(),
        Some("write a value on each side of `&&`, or remove it")
    );
    let problems = check("true && !").unwrap_err();
    assert!(
        problems
            .iter()
            .any(|p| p.help.as_deref() == Some("write a value after `!`, or remove it")),
        "{problems:#?}"
    );
}

#[test]
fn too_long_points_where_the_limit_is_crossed() {
    let text = format!("{}true", "!".repeat(MAX_TOKENS + 4));
    let (p, at) = one(&text);
    assert_eq!(p.code, "rulec::when::too-long");
    assert_eq!(at, "!!!!true");
}

#[test]
fn a_hyphenated_word_is_one_problem_with_quotes_help() {
    let text = r#"to == "parked" || to == stand-by"#;
    let (p, at) = one(text);
    assert_eq!(at, "stand-by");
    assert_eq!(p.label, "read as `stand - by`");
    assert_eq!(p.message, "unknown name `stand` in `stand-by`");
    assert!(
        p.help
            .unwrap_or_default()
            .ends_with(r#"for the text, write "stand-by""#),
        "{text}"
    );
    // `to` in the middle is a known name; `ready` and `drive` are one problem.
    let (p, at) = one("from == ready-to-drive");
    assert_eq!(at, "ready-to-drive");
    assert!(p.help.unwrap_or_default().contains(r#""ready-to-drive""#));
    // Inside a data path: the key cannot be read.
    let (p, at) = one("data.battery-level > 3");
    assert_eq!(at, "battery-level");
    assert!(p.help.unwrap_or_default().contains("data key with `-`"));
    // A real subtraction keeps the plain unknown-name help.
    let (p, _) = one("speed-1 > 3");
    assert!(p.help.unwrap_or_default().contains("`data.speed`"));
}

#[test]
fn not_on_a_comparison_explains_precedence() {
    let (p, at) = one(r#"!to == "parked""#);
    assert_eq!((p.code.as_str(), at), ("rulec::when::type-mismatch", "to"));
    assert!(p.help.unwrap_or_default().contains(r#"!(to == "parked")"#));
}

#[test]
fn operators_from_other_languages() {
    for (text, at, fix) in [
        ("data.speed => 5", "=>", "use `>=`"),
        ("data.speed =< 5", "=<", "use `<=`"),
        (r#"to <> "a""#, "<>", "use `!=`"),
    ] {
        let (p, span) = one(text);
        assert_eq!(
            (p.code.as_str(), span, p.label.as_str()),
            ("rulec::when::syntax", at, fix),
            "{text}"
        );
    }
    // With a space between, `= >` stays an assignment.
    let problems = check("data.speed = > 5").unwrap_err();
    assert_eq!(problems[0].code, "rulec::when::assignment");
    for text in ["to != null", "data.x == None", "nil"] {
        let problems = check(text).unwrap_err();
        let help = problems[0].help.clone().unwrap_or_default();
        assert!(help.starts_with("`when` has no null"), "{text}: {help}");
    }
}

/// Found by `cargo xtask fuzz`: a comment inside a single-quoted word made
/// the quote's position fall inside a multi-byte character.
#[test]
fn single_quote_after_a_comment_with_multibyte_text() {
    let text = "data./*0x\"ü\")*/data.a' == 1";
    let problems = check(text).expect_err("single quotes are an error");
    for problem in &problems {
        assert!(text.is_char_boundary(problem.span.start), "{problem:?}");
        assert!(text.is_char_boundary(problem.span.end), "{problem:?}");
        assert!(problem.span.end <= text.len(), "{problem:?}");
    }
    assert!(problems
        .iter()
        .any(|p| p.code == "rulec::when::single-quotes"));
}

/// docs/when-language.md#conversions, docs/when-language.md#membership.
#[test]
fn conversions_and_membership() {
    for text in [
        r#"int(state("battery:0", "charge")) < 20"#,
        r#"float(data.x) > 2.5 && str(data.n) == "5" && str(true) == "true""#,
        r#"contains(("parked", "stand-by"), to)"#,
        r#"contains((1, 2.5, "x", data.k), data.v)"#,
        r#"int(" 42 ") == 42 && float("2.5") == 2.5 && str(2.5) == "2.5""#,
    ] {
        ok(text);
    }
    let (p, at) = one("int(true) == 1");
    assert_eq!((p.code, at), (Code::WhenTypeMismatch, "true"));
    let (p, at) = one(r#"contains("parked", to)"#);
    assert_eq!((p.code, at), (Code::WhenArguments, r#""parked""#));
    let (p, _) = one("contains((1, 2))");
    assert_eq!(p.code, Code::WhenArguments);
    let (p, at) = one(r#"contains(((1, 2), 3), to)"#);
    assert_eq!((p.code, at), (Code::WhenTuple, "1, 2"));
    let (p, at) = one(r#"int("19%") < 20"#);
    assert_eq!((p.code, at), (Code::WhenAlwaysFails, r#"int("19%")"#));
}

#[test]
fn in_and_string_ordering_get_the_help_that_fixes_them() {
    let (p, at) = one(r#"to in ["parked", "stand-by"]"#);
    assert_eq!((p.code, at), (Code::WhenWordOperator, "in"));
    let help = p.help.unwrap_or_default();
    assert!(
        help.contains(r#"contains(("parked", "stand-by"), to)"#),
        "{help}"
    );
    // A number written as a string: the number itself, not `int("20")`.
    let (p, _) = one(r#"int(to) < "20""#);
    let help = p.help.unwrap_or_default();
    assert!(help.contains("`20`"), "{help}");
    assert!(!help.contains(r#"int("20")"#), "{help}");
    let (p, _) = one(r#"state("battery:0", "charge") < 20"#);
    let help = p.help.unwrap_or_default();
    assert!(
        help.contains(r#"int(state("battery:0", "charge"))"#),
        "{help}"
    );
}
