//! Copies issued back to back from the host, as vLLM 0.4's swap issues them (one
//! `cudaMemcpyAsync` per block per layer): the fit that tells a copy's occupancy of the copy
//! engine (DMA setup and bytes) from the completion a chain of copies pays once, and the host's
//! issue rate.
//!
//! The calibration's own copy curves cannot tell them apart: the executor records an event
//! around every copy, so each measured copy shows its whole latency (4.5 us on the H200). A table
//! of chains (`calibrate/data/host_costs/swap_blocks_h200.csv`: copies, bytes, host and wall
//! seconds per chain) can: where the device binds, the wall time per copy is `setup + bytes /
//! bandwidth`; where the host binds, it is the issue time. The single-copy latency less the
//! setup is the completion (`[link] copy_completion_us`).

use crate::error::Error;

/// One chain of equal copies.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ChainRow {
    /// Copies in the chain.
    pub copies: u64,
    /// Bytes of the whole chain.
    pub bytes: u64,
    /// Seconds the host spent issuing them.
    pub host_s: f64,
    /// Seconds from the first issue to the last copy's end.
    pub wall_s: f64,
}

/// What a table of chains gives.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ChainFit {
    /// Host seconds per issued copy (the rows of the smallest copies).
    pub issue_s: f64,
    /// Seconds each copy occupies the copy engine beyond its bytes.
    pub setup_s: f64,
    /// Sustained bandwidth of back-to-back copies, bytes/s.
    pub bandwidth: f64,
    /// Rows where the device bound (the setup and bandwidth fit).
    pub device_rows: usize,
}

/// Reads a table of chains: a CSV with (at least) the columns `copies`, `bytes`, `host_s` and
/// `wall_s`, `#` comment lines skipped. `origin` names the file in errors.
pub fn read_chains(text: &str, origin: &str) -> Result<Vec<ChainRow>, Error> {
    let err = |line: usize, column: &str, why: String| Error::Table {
        origin: origin.to_string(),
        line: line as u64,
        column: column.to_string(),
        why,
    };
    let mut lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim_start().starts_with('#') && !l.trim().is_empty());
    let (_, header) = lines
        .next()
        .ok_or_else(|| err(0, "", "no header line".into()))?;
    let names: Vec<&str> = header.split(',').map(str::trim).collect();
    let col = |name: &str| {
        names.iter().position(|n| *n == name).ok_or_else(|| {
            err(
                0,
                name,
                "missing (needs copies, bytes, host_s, wall_s)".into(),
            )
        })
    };
    let (c, b, h, w) = (
        col("copies")?,
        col("bytes")?,
        col("host_s")?,
        col("wall_s")?,
    );
    let mut rows = Vec::new();
    for (i, line) in lines {
        let f: Vec<&str> = line.split(',').map(str::trim).collect();
        let get = |j: usize, name: &str| {
            f.get(j)
                .copied()
                .ok_or_else(|| err(i + 1, name, "missing".into()))
        };
        let count = |j: usize, name: &str| -> Result<u64, Error> {
            get(j, name)?
                .parse::<u64>()
                .ok()
                .filter(|&v| v > 0)
                .ok_or_else(|| err(i + 1, name, "must be a positive integer".into()))
        };
        let secs = |j: usize, name: &str| -> Result<f64, Error> {
            get(j, name)?
                .parse::<f64>()
                .ok()
                .filter(|v| v.is_finite() && *v > 0.0)
                .ok_or_else(|| err(i + 1, name, "must be seconds, more than 0".into()))
        };
        rows.push(ChainRow {
            copies: count(c, "copies")?,
            bytes: count(b, "bytes")?,
            host_s: secs(h, "host_s")?,
            wall_s: secs(w, "wall_s")?,
        });
    }
    Ok(rows)
}

/// Fits a table of chains: rows where the host spent under 90% of the wall time issuing are
/// the device's, and a least-squares line through their wall time per copy against bytes per
/// copy gives the setup (intercept) and bandwidth (slope); the issue time is the mean host time
/// per copy over the rows of the smallest copies (the host binds there). `None` without two
/// device-bound copy sizes or with a line that is not increasing.
pub fn fit_chains(rows: &[ChainRow]) -> Option<ChainFit> {
    let per = |r: &ChainRow| {
        let n = r.copies as f64;
        (r.bytes as f64 / n, r.host_s / n, r.wall_s / n)
    };
    let device: Vec<(f64, f64)> = rows
        .iter()
        .map(per)
        .filter(|&(_, h, w)| h < 0.9 * w)
        .map(|(b, _, w)| (b, w))
        .collect();
    let n = device.len() as f64;
    let (mx, my) = device
        .iter()
        .fold((0.0, 0.0), |(x, y), &(b, w)| (x + b / n, y + w / n));
    let sxx: f64 = device.iter().map(|&(b, _)| (b - mx) * (b - mx)).sum();
    let sxy: f64 = device.iter().map(|&(b, w)| (b - mx) * (w - my)).sum();
    if device.len() < 2 || sxx <= 0.0 || sxy <= 0.0 {
        return None;
    }
    let slope = sxy / sxx;
    let smallest = rows.iter().map(|r| r.bytes / r.copies).min().expect("rows");
    let issue: Vec<f64> = rows
        .iter()
        .filter(|r| r.bytes / r.copies == smallest)
        .map(|r| r.host_s / r.copies as f64)
        .collect();
    Some(ChainFit {
        issue_s: issue.iter().sum::<f64>() / issue.len() as f64,
        setup_s: (my - slope * mx).max(0.0),
        bandwidth: 1.0 / slope,
        device_rows: device.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_synthetic_table_gives_back_its_parameters() {
        // copies x max(issue 2.5 us, 2 us + bytes / 50 GB/s), host time = issue where it binds.
        let rows: Vec<ChainRow> = [4096u64, 65536, 262144, 1 << 20]
            .iter()
            .map(|&b| {
                let dev = 2e-6 + b as f64 / 50e9;
                let per = dev.max(2.5e-6);
                let host = if dev > 2.5e-6 { 0.5 * per } else { per };
                ChainRow {
                    copies: 100,
                    bytes: 100 * b,
                    host_s: 100.0 * host,
                    wall_s: 100.0 * per,
                }
            })
            .collect();
        let f = fit_chains(&rows).unwrap();
        assert!((f.setup_s - 2e-6).abs() < 1e-12, "{f:?}");
        assert!((f.bandwidth / 50e9 - 1.0).abs() < 1e-9);
        assert!((f.issue_s - 2.5e-6).abs() < 1e-15);
        assert_eq!(f.device_rows, 3);
        // One device-bound size cannot fix a line.
        assert_eq!(fit_chains(&rows[..2]), None);
    }

    #[test]
    fn a_malformed_table_names_its_line_and_column() {
        let e = read_chains("copies,bytes,host_s\n1,2,3\n", "t.csv").unwrap_err();
        assert_eq!(
            e.to_string(),
            "t.csv:0: column wall_s: missing (needs copies, bytes, host_s, wall_s)"
        );
        let e = read_chains("# c\ncopies,bytes,host_s,wall_s\n1,2,3,-1\n", "t.csv").unwrap_err();
        assert_eq!(
            e.to_string(),
            "t.csv:3: column wall_s: must be seconds, more than 0"
        );
    }
}
