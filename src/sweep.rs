//! `kvplan sweep` and `kvplan merge`: read and check the sweep file, pick this run's points
//! (`--shard`, `--resume`), stream the rows the library produces to stdout or `--out`, and join
//! shard outputs. The sweep itself (file, points, rows, merge) is `kvplan_sweep`.

use std::io::{IsTerminal, Write};
use std::path::Path;

use kvplan_sweep::{Format, Sweep};

use crate::args::{MergeArgs, SweepArgs, SweepFormat};
use crate::commands::Output;
use crate::error::CliError;
use crate::output::{open_stream, write_output};

/// `kvplan sweep`.
pub fn sweep(args: &SweepArgs) -> Result<Output, CliError> {
    let sweep = Sweep::from_file(&args.file).map_err(|e| CliError::input(e.to_string()))?;
    let n = sweep.len();
    if n > args.max_points && !args.yes {
        return Err(CliError::input(format!(
            "{}: {n} points, more than --max-points {}; pass --yes to run them all, or narrow the axes",
            args.file.display(),
            args.max_points
        )));
    }
    let format = match args.format {
        SweepFormat::Csv => Format::Csv,
        SweepFormat::Jsonl => Format::Jsonl,
    };
    let plot = plot_spec(args, &sweep, format)?;
    let (first, step) = args.shard.map_or((0, 1), |s| (s.index, s.count));
    let mut indices: Vec<u64> = (first..n).step_by(step as usize).collect();

    // --resume: keep the whole rows already written; everything is checked before writing.
    let mut keep = None;
    let mut kept = 0;
    if let (true, Some(out)) = (args.resume, &args.out)
        && std::fs::metadata(out).is_ok_and(|m| m.is_file())
    {
        let existing = std::fs::read(out).map_err(|e| {
            CliError::input(format!("--resume: cannot read '{}': {e}", out.display()))
        })?;
        let (bytes, done) = sweep
            .resume_point(&existing, format, &indices)
            .map_err(|e| CliError::input(format!("--resume: {}: {e}", out.display())))?;
        keep = Some(bytes as u64);
        kept = done;
        indices.drain(..done);
    }

    let mut sink: Box<dyn Write> = match &args.out {
        Some(p) => Box::new(open_stream(p, "--out", keep)?),
        None => Box::new(std::io::stdout().lock()),
    };
    let what = args
        .out
        .as_ref()
        .map_or("stdout".to_string(), |p| format!("'{}'", p.display()));
    let fail = |e: std::io::Error| CliError::failure(format!("cannot write {what}: {e}"));
    if keep.unwrap_or(0) == 0 {
        let header = sweep.header(format);
        if let Err(e) = sink
            .write_all(header.as_bytes())
            .and_then(|()| sink.flush())
        {
            return quiet_pipe(e).map_err(fail);
        }
    }
    let bar = (std::io::stderr().is_terminal() && !indices.is_empty()).then(|| {
        let bar = indicatif::ProgressBar::new(indices.len() as u64);
        if let Ok(style) = indicatif::ProgressStyle::with_template(
            "{bar:40} {pos}/{len} points, {elapsed} elapsed, about {eta} left",
        ) {
            bar.set_style(style);
        }
        bar
    });
    let mut errors = 0u64;
    let ran = indices.len();
    let result = sweep.run_ordered(&indices, |row| {
        errors += u64::from(row.outcome.is_err());
        if let Some(b) = &bar {
            b.inc(1);
        }
        // One write and a flush per row: a run killed now leaves whole rows (and at most one
        // cut-off line, which --resume drops).
        sink.write_all(sweep.format_row(&row, format).as_bytes())?;
        sink.flush()
    });
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    if let Err(e) = result {
        return quiet_pipe(e).map_err(fail);
    }
    drop(sink);
    let plotted = match (&plot, &args.out) {
        (Some(spec), Some(out)) => {
            crate::plot::plot_table(out, &spec.x, &spec.y, &spec.series, None, &spec.file)?;
            format!("; plot written to {}", spec.file.display())
        }
        _ => String::new(),
    };
    // With --out, stdout is free for a summary; on stdout the rows must stay alone.
    match &args.out {
        Some(p) => Ok(format!(
            "{}: {ran} points run ({} ok, {errors} error){}{plotted}\n",
            p.display(),
            ran as u64 - errors,
            if args.resume {
                format!(", {kept} kept from the previous run")
            } else {
                String::new()
            }
        )),
        None => {
            if errors > 0 {
                eprintln!(
                    "note: {errors} of {ran} points could not run (status error; the reason column says why)"
                );
            }
            Ok(String::new())
        }
    }
}

/// A closed pipe (`| head`) ends the sweep quietly.
fn quiet_pipe(e: std::io::Error) -> Result<Output, std::io::Error> {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        Ok(String::new())
    } else {
        Err(e)
    }
}

/// `kvplan merge`.
pub fn merge(args: &MergeArgs) -> Result<Output, CliError> {
    let (out, inputs) = match &args.out {
        Some(o) => (o.as_path(), &args.paths[..]),
        None => (args.paths[0].as_path(), &args.paths[1..]),
    };
    if inputs.is_empty() {
        return Err(CliError::input(
            "merge: give the output file and the shard outputs: kvplan merge OUT SHARD... (or --out OUT SHARD...)",
        ));
    }
    let same = |a: &Path, b: &Path| match (a.canonicalize(), b.canonicalize()) {
        (Ok(x), Ok(y)) => x == y,
        _ => a == b,
    };
    if let Some(i) = inputs.iter().find(|i| same(i, out)) {
        return Err(CliError::input(format!(
            "merge: the output '{}' is also an input; the output comes first (kvplan merge OUT SHARD...) or after --out",
            i.display()
        )));
    }
    let texts = inputs
        .iter()
        .map(|p| {
            std::fs::read_to_string(p)
                .map(|t| (p.display().to_string(), t))
                .map_err(|e| CliError::input(format!("{}: cannot read: {e}", p.display())))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let points = match &args.sweep {
        Some(f) => Some(
            Sweep::from_file(f)
                .map_err(|e| CliError::input(e.to_string()))?
                .len(),
        ),
        None => None,
    };
    let merged = kvplan_sweep::rows::merge(&texts, points)
        .map_err(|e| CliError::input(format!("merge: {e}")))?;
    write_output(out, "merge output", |w| w.write_all(merged.as_bytes()))?;
    Ok(format!("{}: merged {} files\n", out.display(), texts.len()))
}

/// What `--plot` draws: checked against the sweep's columns before anything runs.
struct PlotSpec {
    file: std::path::PathBuf,
    x: String,
    y: String,
    series: Vec<String>,
}

fn plot_spec(
    args: &SweepArgs,
    sweep: &Sweep,
    format: Format,
) -> Result<Option<PlotSpec>, CliError> {
    let Some(file) = &args.plot else {
        return Ok(None);
    };
    if format != Format::Csv {
        return Err(CliError::input(
            "--plot: draws from the CSV rows; drop --format jsonl (or plot a CSV with `kvplan plot`)",
        ));
    }
    let axes = sweep.columns();
    let header = sweep.header_columns();
    let x = match &args.plot_x {
        Some(x) => x.clone(),
        None => axes.last().cloned().ok_or_else(|| {
            CliError::input("--plot-x: the sweep has no axis; name the column to plot against")
        })?,
    };
    let y = args.plot_y.clone().unwrap_or_else(|| {
        if sweep.kind() == kvplan_sweep::Kind::Serve {
            "ttft_p99_s"
        } else {
            "decode_latency_s"
        }
        .to_string()
    });
    let series: Vec<String> = match &args.plot_series {
        Some(s) => s
            .split(',')
            .map(|c| c.trim().to_string())
            .filter(|c| !c.is_empty())
            .collect(),
        None => axes.iter().filter(|a| **a != x).cloned().collect(),
    };
    for (flag, c) in [("--plot-x", &x), ("--plot-y", &y)]
        .into_iter()
        .chain(series.iter().map(|c| ("--plot-series", c)))
    {
        if !header.contains(c) {
            return Err(CliError::input(format!(
                "{flag}: no column '{c}' in this sweep; its columns are {}",
                header.join(", ")
            )));
        }
    }
    Ok(Some(PlotSpec {
        file: file.clone(),
        x,
        y,
        series,
    }))
}
