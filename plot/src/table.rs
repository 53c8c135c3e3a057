//! A metric against an axis from a kvplan CSV table (a sweep's output: axis columns first, then
//! metrics): one series per distinct value of the series columns, axis labels from the column
//! names with units inferred from their suffixes.

use crate::{Error, Series};

/// Series taken from a table, and the rows that could not be used.
#[derive(Debug, Clone, PartialEq)]
pub struct TableSeries {
    /// One per distinct value of the series columns, in order of first appearance; points
    /// sorted by x.
    pub series: Vec<Series>,
    /// Rows skipped because their x or y is not a number (error rows, empty cells).
    pub skipped: usize,
}

/// Reads a CSV table: the header and the rows (ragged rows allowed; missing cells are empty).
/// Errors ([`Error::Read`]) name the file.
pub fn read_table(path: &std::path::Path) -> Result<(Vec<String>, Vec<Vec<String>>), Error> {
    let shown = path.display();
    let mut r = csv::ReaderBuilder::new()
        .flexible(true)
        .from_path(path)
        .map_err(|e| Error::Read(format!("{shown}: cannot read: {e}")))?;
    let header: Vec<String> = r
        .headers()
        .map_err(|e| Error::Read(format!("{shown}: {e}")))?
        .iter()
        .map(|h| h.trim().to_string())
        .collect();
    let mut rows = Vec::new();
    for rec in r.records() {
        let rec = rec.map_err(|e| Error::Read(format!("{shown}: {e}")))?;
        rows.push(rec.iter().map(String::from).collect());
    }
    if header.iter().all(|h| h.is_empty()) {
        return Err(Error::Read(format!("{shown}: the table has no header")));
    }
    Ok((header, rows))
}

/// Splits the rows of a table (`header` names the columns, each row holds one cell per column)
/// into series of (x, y) points: x from column `x`, y from column `y`, one series per distinct
/// value of the columns `by` (named `col=value, ...`; one series named after `y` when `by` is
/// empty).
///
/// Errors: [`Error::UnknownColumn`] naming the table's columns, [`Error::EmptyTable`],
/// [`Error::NonNumeric`] when `x` or `y` has no numeric cell at all.
pub fn series_from_table(
    header: &[String],
    rows: &[Vec<String>],
    x: &str,
    y: &str,
    by: &[String],
) -> Result<TableSeries, Error> {
    let col = |name: &str| {
        header
            .iter()
            .position(|h| h == name)
            .ok_or_else(|| Error::UnknownColumn {
                name: name.to_string(),
                columns: header.join(","),
            })
    };
    let xi = col(x)?;
    let yi = col(y)?;
    let bi: Vec<usize> = by.iter().map(|b| col(b)).collect::<Result<_, _>>()?;
    if rows.is_empty() {
        return Err(Error::EmptyTable);
    }
    let num = |row: &Vec<String>, i: usize| {
        row.get(i)
            .and_then(|c| c.trim().parse::<f64>().ok())
            .filter(|v| v.is_finite())
    };
    for (i, name) in [(xi, x), (yi, y)] {
        if !rows.iter().any(|r| num(r, i).is_some()) {
            return Err(Error::NonNumeric(name.to_string()));
        }
    }
    if bi.is_empty() {
        repeated_x(header, rows, xi, yi)?;
    }
    let mut series: Vec<Series> = Vec::new();
    let mut skipped = 0;
    for row in rows {
        let (Some(px), Some(py)) = (num(row, xi), num(row, yi)) else {
            skipped += 1;
            continue;
        };
        let name = if bi.is_empty() {
            y.to_string()
        } else {
            bi.iter()
                .map(|&i| {
                    format!(
                        "{}={}",
                        header[i],
                        row.get(i).map(String::as_str).unwrap_or("")
                    )
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        match series.iter_mut().find(|s| s.name == name) {
            Some(s) => s.points.push((px, py)),
            None => series.push(Series::new(name, vec![(px, py)])),
        }
    }
    for s in &mut series {
        // Stable: equal x keep the table's order.
        s.points.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    Ok(TableSeries { series, skipped })
}

/// Without series columns: an x value held by several rows is an error naming the columns
/// that differ between them and repeat across the table (a sweep's other axes), not one line
/// joining them all.
fn repeated_x(header: &[String], rows: &[Vec<String>], xi: usize, yi: usize) -> Result<(), Error> {
    fn cell(r: &[String], i: usize) -> &str {
        r.get(i).map_or("", |c| c.trim())
    }
    let mut seen: std::collections::BTreeMap<&str, Vec<usize>> = Default::default();
    for (n, r) in rows.iter().enumerate() {
        if !cell(r, xi).is_empty() {
            seen.entry(cell(r, xi)).or_default().push(n);
        }
    }
    // The first repeated value in the table's order.
    let Some((value, at)) = (rows.iter())
        .map(|r| cell(r, xi))
        .find_map(|v| seen.get(v).filter(|at| at.len() > 1).map(|at| (v, at)))
    else {
        return Ok(());
    };
    let distinct = |i: usize| {
        (rows.iter().map(|r| cell(r, i)))
            .collect::<std::collections::BTreeSet<_>>()
            .len()
    };
    let skip = ["point", "status", "reason"];
    let candidates: Vec<&str> = (0..header.len())
        .filter(|&i| i != xi && i != yi && !skip.contains(&header[i].as_str()))
        .filter(|&i| {
            at.iter()
                .any(|&n| cell(&rows[n], i) != cell(&rows[at[0]], i))
        })
        .filter(|&i| distinct(i) < rows.len())
        .map(|i| header[i].as_str())
        .collect();
    Err(Error::RepeatedX {
        x: header[xi].clone(),
        value: value.to_string(),
        rows: at.len(),
        candidates: if candidates.is_empty() {
            "none found".into()
        } else {
            candidates.join(", ")
        },
    })
}

/// Unit suffixes of kvplan's column names, longest first.
const UNITS: [(&str, &str); 7] = [
    ("_tok_s", "tokens/s"),
    ("_per_s", "per second"),
    ("_fraction", "fraction"),
    ("_bytes", "bytes"),
    ("_gib", "GiB"),
    ("_ms", "ms"),
    ("_s", "seconds"),
];

/// An axis label for a column: its name with the unit its suffix implies (`decode_latency_s` →
/// `decode_latency_s (seconds)`), or the bare name.
pub fn axis_label(column: &str) -> String {
    UNITS
        .iter()
        .find(|(suffix, _)| column.ends_with(suffix) && column.len() > suffix.len())
        .map(|(_, unit)| format!("{column} ({unit})"))
        .unwrap_or_else(|| column.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|c| c.to_string()).collect()
    }

    #[test]
    fn one_series_per_distinct_value_sorted_by_x() {
        let header = s(&["strategy", "batch", "decode_throughput_tok_s"]);
        let rows = vec![
            s(&["kvpr", "16", "20"]),
            s(&["kvpr", "8", "10"]),
            s(&["gpu-only", "8", "30"]),
            s(&["gpu-only", "16", "error: does not fit"]),
        ];
        let t = series_from_table(
            &header,
            &rows,
            "batch",
            "decode_throughput_tok_s",
            &s(&["strategy"]),
        )
        .unwrap();
        assert_eq!(t.skipped, 1);
        assert_eq!(
            t.series,
            vec![
                Series::new("strategy=kvpr", vec![(8.0, 10.0), (16.0, 20.0)]),
                Series::new("strategy=gpu-only", vec![(8.0, 30.0)]),
            ]
        );
        // Without series, batch 8 in two rows is refused, naming the column that differs.
        let e = series_from_table(&header, &rows, "batch", "decode_throughput_tok_s", &[])
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("batch = 16 appears in 2 rows") && e.contains("(strategy)"),
            "{e}"
        );
        // One value per x: one line.
        let t = series_from_table(&header, &rows[..2], "batch", "decode_throughput_tok_s", &[])
            .unwrap();
        assert_eq!(t.series.len(), 1);
        assert_eq!(t.series[0].name, "decode_throughput_tok_s");
    }

    #[test]
    fn bad_tables_are_errors() {
        let header = s(&["a", "b"]);
        let rows = vec![s(&["x", "1"])];
        let e = series_from_table(&header, &rows, "c", "b", &[]).unwrap_err();
        assert_eq!(e.to_string(), "no column 'c' (columns: a,b)");
        assert!(matches!(
            series_from_table(&header, &[], "a", "b", &[]),
            Err(Error::EmptyTable)
        ));
        assert!(matches!(
            series_from_table(&header, &rows, "a", "b", &[]),
            Err(Error::NonNumeric(c)) if c == "a"
        ));
    }

    #[test]
    fn units_from_suffixes() {
        assert_eq!(axis_label("ttft_s"), "ttft_s (seconds)");
        assert_eq!(axis_label("h2d_bytes"), "h2d_bytes (bytes)");
        assert_eq!(
            axis_label("decode_throughput_tok_s"),
            "decode_throughput_tok_s (tokens/s)"
        );
        assert_eq!(
            axis_label("gpu_busy_fraction"),
            "gpu_busy_fraction (fraction)"
        );
        assert_eq!(axis_label("batch"), "batch");
        assert_eq!(axis_label("_s"), "_s");
    }
}
