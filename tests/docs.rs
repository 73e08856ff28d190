//! The transition table is written once, in docs/transitions.md, and included in the crate
//! docs ("States") and the state machine's module docs. These tests check that it is included
//! where it is shown and that every row names a real transition: a real input of the machine,
//! real states, and unit tests named after the row.

const TABLE: &str = include_str!("../docs/transitions.md");
const MACHINE: &str = include_str!("../src/core/machine.rs");
const MACHINE_TESTS: [&str; 11] = [
    include_str!("../src/core/machine/tests.rs"),
    include_str!("../src/core/machine/tests/confirm.rs"),
    include_str!("../src/core/machine/tests/protocol.rs"),
    include_str!("../src/core/machine/tests/connection.rs"),
    include_str!("../src/core/machine/tests/panics.rs"),
    include_str!("../src/core/machine/tests/pause.rs"),
    include_str!("../src/core/machine/tests/props.rs"),
    include_str!("../src/core/machine/tests/requests.rs"),
    include_str!("../src/core/machine/tests/rules.rs"),
    include_str!("../src/core/machine/tests/tls.rs"),
    include_str!("../src/core/machine/tests/window.rs"),
];
const CRATE_DOCS: &str = include_str!("../src/lib.rs");
const EVENT: &str = include_str!("../src/event.rs");
const DESIGN: &str = include_str!("../docs/design.md");

/// One numbered row of the table, split into its cells (number, from, input, to, effect).
fn rows() -> Vec<Vec<&'static str>> {
    TABLE
        .lines()
        .filter(|l| l.starts_with("| ") && l[2..].starts_with(|c: char| c.is_ascii_digit()))
        .map(|l| l.trim_matches('|').split(" | ").map(str::trim).collect())
        .collect()
}

/// The variant names of the enum `name` in `source` (its body up to the closing brace).
fn variants(source: &str, name: &str) -> Vec<String> {
    let start = source
        .find(name)
        .unwrap_or_else(|| panic!("{name} in the source"));
    let body = &source[start..];
    let body = &body
        [body.find('{').expect("an opening brace") + 1..body.find("\n}").expect("a closing brace")];
    body.lines()
        .map(str::trim)
        .filter(|l| l.starts_with(|c: char| c.is_ascii_uppercase()))
        .map(|l| {
            l.split(|c: char| !c.is_ascii_alphanumeric())
                .next()
                .unwrap_or("")
                .to_owned()
        })
        .collect()
}

/// The first word of a cell.
fn head(cell: &str) -> &str {
    cell.split(|c: char| !c.is_ascii_alphanumeric())
        .next()
        .unwrap_or("")
}

#[test]
fn the_crate_docs_and_the_machine_include_the_one_table() {
    assert!(CRATE_DOCS.contains(r#"#![doc = include_str!("../docs/transitions.md")]"#));
    assert!(MACHINE.contains(r#"#![doc = include_str!("../../docs/transitions.md")]"#));
    assert!(
        DESIGN.contains("(transitions.md)"),
        "design.md links to the table"
    );
    for (name, text) in [
        ("crate docs", CRATE_DOCS),
        ("machine", MACHINE),
        ("design", DESIGN),
    ] {
        assert!(
            !text.contains("| 1 | Idle | Start |"),
            "the {name} keeps a copy of the table"
        );
    }
}

#[test]
fn the_table_numbers_its_rows_in_order() {
    let rows = rows();
    for (i, row) in rows.iter().enumerate() {
        assert_eq!(row[0], (i + 1).to_string(), "row {}: {row:?}", i + 1);
        assert_eq!(row.len(), 5, "row {}: five cells", i + 1);
    }
    assert!(rows.len() >= 23, "{} rows", rows.len());
}

#[test]
fn every_row_names_an_input_the_machine_has() {
    let inputs = variants(MACHINE, "enum Ev {");
    assert!(inputs.iter().any(|v| v == "TcpConnected"), "{inputs:?}");
    for row in rows() {
        assert!(
            inputs.iter().any(|v| v == head(row[2])),
            "row {}: input {:?} is not one of {inputs:?}",
            row[0],
            row[2]
        );
    }
}

#[test]
fn every_row_goes_between_real_states() {
    let states = variants(EVENT, "pub enum State {");
    assert!(states.iter().any(|v| v == "Cooldown"), "{states:?}");
    let real = |word: &str| states.iter().any(|s| s == word);
    for row in rows() {
        let from = row[1];
        assert!(
            from == "any but Closed" || from.split(", ").all(real),
            "row {}: from {from:?}",
            row[0]
        );
        let to = row[3];
        assert!(
            to == "same" || to.split('/').all(real) || real(head(to)),
            "row {}: to {to:?}",
            row[0]
        );
    }
}

/// The rows a machine test is named after: `row4_…` names row 4, `row19_and_20_…` rows 19
/// and 20.
fn rows_tested() -> Vec<String> {
    let mut rows = Vec::new();
    for source in MACHINE_TESTS {
        for name in source.split("fn row").skip(1) {
            let mut rest = name;
            loop {
                let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
                if digits.is_empty() {
                    break;
                }
                rest = &rest[digits.len()..];
                rows.push(digits);
                match rest.strip_prefix("_and_") {
                    Some(more) => rest = more,
                    None => break,
                }
            }
        }
    }
    rows
}

#[test]
fn every_row_has_a_machine_test_named_after_it() {
    let tested = rows_tested();
    for row in rows() {
        assert!(
            tested.iter().any(|r| r == row[0]),
            "no test named row{}_…",
            row[0]
        );
    }
}
