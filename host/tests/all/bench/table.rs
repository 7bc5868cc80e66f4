//! The side-by-side table: one row per measure, one column per system, and the ratio of the
//! first column to the second.

use std::fmt::Write as _;

/// One measured value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Measure {
    Exact(f64),
    /// The step did not finish in the time allowed: the value is at least this.
    MoreThan(f64),
}

impl Measure {
    fn text(self, digits: usize) -> String {
        match self {
            Measure::Exact(v) => format!("{v:.digits$}"),
            Measure::MoreThan(v) => format!("> {v:.digits$}"),
        }
    }
}

/// The ratio of `a` to `b`, with "<" or ">" when one side is only a bound.
fn ratio(a: Measure, b: Measure) -> String {
    match (a, b) {
        (_, Measure::Exact(b) | Measure::MoreThan(b)) if b == 0.0 => "—".to_string(),
        (Measure::Exact(a), Measure::Exact(b)) => format!("{:.2}", a / b),
        (Measure::Exact(a), Measure::MoreThan(b)) => format!("< {:.2}", a / b),
        (Measure::MoreThan(a), Measure::Exact(b)) => format!("> {:.2}", a / b),
        (Measure::MoreThan(_), Measure::MoreThan(_)) => "?".to_string(),
    }
}

struct Row {
    label: String,
    values: Vec<Option<Measure>>,
    /// Digits after the point.
    digits: usize,
}

/// Rows of measures under one column per system.
pub struct Table {
    columns: Vec<String>,
    rows: Vec<Row>,
}

impl Table {
    pub fn new(columns: Vec<String>) -> Self {
        Self {
            columns,
            rows: Vec::new(),
        }
    }

    /// A row of exact values (`None`: not measured).
    pub fn row(&mut self, label: impl Into<String>, digits: usize, values: Vec<Option<f64>>) {
        let values = values.into_iter().map(|v| v.map(Measure::Exact)).collect();
        self.measures(label, digits, values);
    }

    /// A row of values some of which may be bounds.
    pub fn measures(
        &mut self,
        label: impl Into<String>,
        digits: usize,
        values: Vec<Option<Measure>>,
    ) {
        self.rows.push(Row {
            label: label.into(),
            values,
            digits,
        });
    }

    /// The table as text; with two columns, a third gives the first over the second.
    pub fn render(&self) -> String {
        let with_ratio = self.columns.len() == 2;
        let width = self.rows.iter().map(|r| r.label.len()).max().unwrap_or(0);
        let col = self
            .columns
            .iter()
            .map(String::len)
            .max()
            .unwrap_or(0)
            .max(10);
        let mut out = String::new();
        let _ = write!(out, "{:width$}", "");
        for c in &self.columns {
            let _ = write!(out, " | {c:>col$}");
        }
        if with_ratio {
            let _ = write!(out, " | {:>9}", "ratio");
        }
        out.push('\n');
        let line = width + self.columns.len() * (col + 3) + if with_ratio { 12 } else { 0 };
        let _ = writeln!(out, "{}", "-".repeat(line));
        for r in &self.rows {
            let _ = write!(out, "{:width$}", r.label);
            for v in &r.values {
                let text = v.map_or_else(|| "—".to_string(), |v| v.text(r.digits));
                let _ = write!(out, " | {text:>col$}");
            }
            if with_ratio {
                let text = match (r.values.first(), r.values.get(1)) {
                    (Some(Some(a)), Some(Some(b))) => ratio(*a, *b),
                    _ => "—".to_string(),
                };
                let _ = write!(out, " | {text:>9}");
            }
            out.push('\n');
        }
        if with_ratio {
            let _ = writeln!(out, "ratio: {} / {}", self.columns[0], self.columns[1]);
        }
        out
    }
}

#[test]
fn ratios_say_when_a_side_is_only_a_bound() {
    let mut t = Table::new(vec!["A".into(), "B".into()]);
    t.row("exact", 1, vec![Some(1.0), Some(4.0)]);
    t.measures(
        "bound",
        0,
        vec![Some(Measure::Exact(60.0)), Some(Measure::MoreThan(1800.0))],
    );
    t.row("missing", 0, vec![Some(1.0), None]);
    let text = t.render();
    let line = |label: &str| {
        text.lines()
            .find(|l| l.starts_with(label))
            .unwrap_or_default()
            .to_string()
    };
    assert!(line("exact").ends_with("0.25"), "{text}");
    assert!(line("bound").contains("> 1800"), "{text}");
    assert!(line("bound").ends_with("< 0.03"), "{text}");
    assert!(line("missing").ends_with("—"), "{text}");
    assert!(text.contains("ratio: A / B"), "{text}");
}
