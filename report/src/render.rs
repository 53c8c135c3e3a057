//! Rendering helpers: aligned text tables and unit formatting for people.

use std::fmt::Write as _;

use serde::Serialize;

use crate::error::Error;

/// Output format (with the `clap` feature, a `clap::ValueEnum`: `table`, `json`, `csv`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Format {
    /// Aligned text for people.
    Table,
    /// One JSON document for programs and notebooks.
    Json,
    /// CSV with a header row.
    Csv,
}

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

/// A plain text table; the first column is left-aligned, the others right-aligned.
#[derive(Debug, Default)]
pub struct Table {
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with a header row.
    pub fn new<S: ToString>(header: &[S]) -> Self {
        Table {
            rows: vec![header.iter().map(|s| s.to_string()).collect()],
        }
    }

    /// Adds a row.
    pub fn row<S: ToString>(&mut self, cells: &[S]) {
        self.rows
            .push(cells.iter().map(|s| s.to_string()).collect());
    }

    /// Renders with two spaces between columns and a rule under the header.
    pub fn render(&self) -> String {
        let cols = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let mut width = vec![0usize; cols];
        for r in &self.rows {
            for (i, c) in r.iter().enumerate() {
                width[i] = width[i].max(c.chars().count());
            }
        }
        let mut out = String::new();
        for (n, r) in self.rows.iter().enumerate() {
            let mut line = String::new();
            for (i, c) in r.iter().enumerate() {
                let pad = width[i] - c.chars().count();
                if i > 0 {
                    line.push_str("  ");
                    line.push_str(&" ".repeat(pad));
                    line.push_str(c);
                } else {
                    line.push_str(c);
                    line.push_str(&" ".repeat(pad));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
            if n == 0 {
                let total: usize = width.iter().sum::<usize>() + 2 * cols.saturating_sub(1);
                out.push_str(&"-".repeat(total));
                out.push('\n');
            }
        }
        out
    }
}

/// Bytes as GiB with two decimals.
pub fn gib(bytes: u64) -> String {
    format!("{:.2} GiB", bytes as f64 / GIB)
}

/// A measured run's figure as its metric is read: a latency (`..._s`) in seconds' units, a rate
/// to three decimals.
pub fn metric_value(metric: &str, x: f64) -> String {
    if kvplan_serve::fidelity::is_latency(metric) {
        secs(x)
    } else {
        format!("{x:.3}")
    }
}

/// Seconds with an adaptive unit.
pub fn secs(s: f64) -> String {
    // NaN: nothing measured (no request finished); infinite: a request never served.
    if s.is_nan() {
        return "-".into();
    }
    if !s.is_finite() {
        return "inf".into();
    }
    if s >= 1.0 {
        format!("{s:.3} s")
    } else if s >= 1e-3 {
        format!("{:.3} ms", s * 1e3)
    } else {
        format!("{:.1} us", s * 1e6)
    }
}

/// A fraction as a percentage.
pub fn pct(f: f64) -> String {
    format!("{:.1}%", f * 100.0)
}

fn median_abs(v: impl Iterator<Item = f64>) -> f64 {
    let mut v: Vec<f64> = v.map(f64::abs).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// The error table of stage comparisons, and the medians over served stages.
pub fn stage_table(rows: &[kvplan_serve::runs::StageComparison]) -> String {
    let mut t = Table::new(&[
        "stage",
        "req/s",
        "TTFT pred / meas",
        "TPOT pred / meas",
        "E2E pred / meas",
        "overloaded pred / meas",
    ]);
    let pm = |p: f64, m: f64, e: f64, ms: bool| {
        let k = if ms { 1e3 } else { 1.0 };
        let u = if ms { "ms" } else { "s" };
        format!("{:.1} / {:.1} {u} ({:+.0}%)", p * k, m * k, e * 100.0)
    };
    for r in rows {
        t.row(&[
            r.name.clone(),
            format!("{}", r.rate_rps),
            pm(
                r.predicted.ttft_mean_s,
                r.measured.ttft_mean_s,
                r.ttft_error,
                true,
            ),
            pm(r.predicted.tpot_s, r.measured.tpot_s, r.tpot_error, true),
            pm(
                r.predicted.e2e_mean_s,
                r.measured.e2e_mean_s,
                r.e2e_error,
                false,
            ),
            format!("{} / {}", r.predicted.overloaded, r.measured.overloaded),
        ]);
    }
    let served = || rows.iter().filter(|r| !r.measured.overloaded);
    let mut s = t.render();
    let _ = writeln!(
        s,
        "median |error| over served stages: TTFT {:.1}%, TPOT {:.1}%, E2E {:.1}%",
        100.0 * median_abs(served().map(|r| r.ttft_error)),
        100.0 * median_abs(served().map(|r| r.tpot_error)),
        100.0 * median_abs(served().map(|r| r.e2e_error)),
    );
    s
}

pub fn json_line<T: Serialize>(v: &T) -> Result<String, Error> {
    let mut s = serde_json::to_string_pretty(v)
        .map_err(|e| Error::Failure(format!("cannot render JSON: {e}")))?;
    s.push('\n');
    Ok(s)
}

pub fn csv_text(header: &[&str], rows: &[Vec<String>]) -> Result<String, Error> {
    let mut w = csv::Writer::from_writer(Vec::new());
    let fail = |e: csv::Error| Error::Failure(format!("cannot render CSV: {e}"));
    w.write_record(header).map_err(fail)?;
    for r in rows {
        w.write_record(r).map_err(fail)?;
    }
    let bytes = w
        .into_inner()
        .map_err(|e| Error::Failure(format!("cannot render CSV: {e}")))?;
    Ok(String::from_utf8(bytes).expect("CSV of UTF-8 fields is UTF-8"))
}

/// A CSV cell for a number: plain decimal notation (Rust never writes an exponent), or empty
/// where the value is undefined (an error relative to a zero measurement), never `inf`/`NaN`.
pub fn csv_number(x: f64) -> String {
    if x.is_finite() {
        x.to_string()
    } else {
        String::new()
    }
}

/// Renders a listing: a JSON array (a single object when `footer` is `None`, i.e. one item was
/// asked for), CSV rows, or a table followed by `footer`. `cells(item, plain)` gives a row:
/// formatted for the table, plain numbers for CSV (whose `csv_header` names the units).
pub fn listing<T: Serialize>(
    format: Format,
    items: &[T],
    header: &[&str],
    csv_header: &[&str],
    cells: impl Fn(&T, bool) -> Vec<String>,
    footer: Option<&str>,
) -> Result<String, Error> {
    match format {
        Format::Json => match (footer, items) {
            (None, [one]) => json_line(one),
            _ => json_line(&items),
        },
        Format::Csv => csv_text(
            csv_header,
            &items.iter().map(|i| cells(i, true)).collect::<Vec<_>>(),
        ),
        Format::Table => {
            let mut t = Table::new(header);
            for i in items {
                t.row(&cells(i, false));
            }
            let mut out = t.render();
            out.push_str(footer.unwrap_or_default());
            Ok(out)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_aligns_columns() {
        let mut t = Table::new(&["name", "value"]);
        t.row(&["a", "1"]);
        t.row(&["long name", "12345"]);
        let r = t.render();
        let lines: Vec<&str> = r.lines().collect();
        assert_eq!(lines[0], "name       value");
        assert_eq!(lines[2], "a              1");
        assert_eq!(lines[3], "long name  12345");
    }
}
