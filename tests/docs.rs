//! The transition table is written three times: in the state machine's module docs (next to
//! the code that implements it), in the crate docs ("States", what users read) and in
//! docs/design.md. These tests keep the three identical.

const MACHINE: &str = include_str!("../src/core/machine.rs");
const CRATE_DOCS: &str = include_str!("../src/lib.rs");
const DESIGN: &str = include_str!("../docs/design.md");

/// The diagram, the table and the notes under it, from the diagram's first line to the
/// table's last note, with any `//!` comment prefix taken off.
fn table(text: &str) -> Vec<&str> {
    let lines: Vec<&str> = text
        .lines()
        .map(|l| {
            l.strip_prefix("//! ")
                .or_else(|| l.strip_prefix("//!"))
                .unwrap_or(l)
        })
        .collect();
    let start = lines
        .iter()
        .position(|l| l.contains("Start") && l.contains("TcpConnected") && l.contains("Alive"))
        .expect("the diagram's first line");
    let end = lines
        .iter()
        .position(|l| l.contains("dropped before it reaches the table"))
        .expect("the table's last note");
    assert!(start < end, "the diagram comes before the notes");
    lines[start..=end].to_vec()
}

#[test]
fn crate_docs_show_the_transition_table_of_the_machine() {
    assert_eq!(table(CRATE_DOCS), table(MACHINE));
}

#[test]
fn design_doc_shows_the_transition_table_of_the_machine() {
    assert_eq!(table(DESIGN), table(MACHINE));
}

#[test]
fn the_table_has_every_row() {
    let rows: Vec<&str> = table(MACHINE)
        .into_iter()
        .filter(|l| l.starts_with("| ") && l[2..].starts_with(|c: char| c.is_ascii_digit()))
        .collect();
    for (i, row) in rows.iter().enumerate() {
        assert!(
            row.starts_with(&format!("| {} |", i + 1)),
            "row {}: {row}",
            i + 1
        );
    }
    assert!(rows.len() >= 22, "{} rows", rows.len());
}
