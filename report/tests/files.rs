//! Output files: plain text, timelines (CSV or Chrome trace by the file name) and rows streamed
//! to a file or stdout.

use std::fs;

use kvplan_report::Error;
use kvplan_report::files::{stream_to, write_text, write_trace};
use kvplan_vocab::schedule::{ScheduleBuilder, StreamKind};
use kvplan_vocab::timeline::{Run, Source, Timeline};

use crate::TempDir;

#[test]
fn text_is_written_whole() {
    let dir = TempDir::new("text");
    let p = dir.path().join("a.svg");
    write_text(&p, "the plot", "<svg/>\n").unwrap();
    assert_eq!(fs::read_to_string(&p).unwrap(), "<svg/>\n");
    let e = write_text(&dir.path().join("no/a.svg"), "the plot", "x").unwrap_err();
    assert!(e.is_input() && e.message().starts_with("the plot: "), "{e}");
}

#[test]
fn a_trace_is_csv_when_the_file_name_says_so_else_a_chrome_trace() {
    let dir = TempDir::new("trace");
    let mut b = ScheduleBuilder::new();
    b.stream(0, StreamKind::Compute, "gpu0.compute");
    let schedule = b.build();
    let timeline = Timeline {
        source: Source::Simulated {
            hardware: "test".into(),
        },
        spans: Vec::new(),
        host: Vec::new(),
    };
    let runs = [Run {
        name: "simulated",
        schedule: &schedule,
        timeline: &timeline,
    }];
    for name in ["t.csv", "t.CSV"] {
        let p = dir.path().join(name);
        write_trace(&p, "the trace", &runs).unwrap();
        let text = fs::read_to_string(&p).unwrap();
        assert!(text.starts_with("run,op,stream,"), "{name}: {text}");
    }
    let p = dir.path().join("t.json");
    write_trace(&p, "the trace", &runs).unwrap();
    let text = fs::read_to_string(&p).unwrap();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert!(json["traceEvents"].is_array(), "{text}");
}

#[test]
fn streaming_keeps_what_it_is_told_and_names_the_file_it_cannot_write() {
    let dir = TempDir::new("stream");
    let p = dir.path().join("rows.csv");
    fs::write(&p, "a,b\n1,2\n3,").unwrap();
    // Resuming: the whole rows kept, the rest appended; what the writer returns comes back.
    let n = stream_to(Some(&p), "the rows", Some(8), |w| {
        w.write_all(b"3,4\n")?;
        Ok(7)
    })
    .unwrap();
    assert_eq!(n, 7);
    assert_eq!(fs::read_to_string(&p).unwrap(), "a,b\n1,2\n3,4\n");
    // Without `keep` the file starts afresh.
    stream_to(Some(&p), "the rows", None, |w| w.write_all(b"x\n")).unwrap();
    assert_eq!(fs::read_to_string(&p).unwrap(), "x\n");
    // A failing write is a failure naming the file; a directory is bad input.
    let e = stream_to(Some(&p), "the rows", None, |_| -> std::io::Result<()> {
        Err(std::io::Error::other("disk full"))
    })
    .unwrap_err();
    let shown = format!("cannot write '{}': disk full", p.display());
    assert_eq!(e, Error::Failure(shown));
    let e = stream_to(Some(dir.path()), "the rows", None, |_| Ok(())).unwrap_err();
    assert!(
        e.is_input() && e.message().contains("is a directory"),
        "{e}"
    );
    // Without a file, stdout.
    let e = stream_to(None, "the rows", None, |_| -> std::io::Result<()> {
        Err(std::io::Error::other("closed"))
    })
    .unwrap_err();
    assert_eq!(e, Error::Failure("cannot write stdout: closed".into()));
}

/// A small serving run: 3 requests of 32 prompt and 4 output tokens on llama-2-7b, with its
/// per-iteration series; a `max_model_len` below 32 rejects them all.
fn served(max_model_len: Option<u32>) -> kvplan_serve::ServeReport {
    use kvplan_serve::scenario::{RawConfig, RawServeScenario};
    let raw = RawServeScenario {
        model: Some("llama-2-7b".into()),
        hardware: Some("h100-sxm".into()),
        workload: kvplan_workloads::WorkloadConfig {
            arrivals: Some("all-at-once".into()),
            prompt_lengths: Some("32".into()),
            output_lengths: Some("4".into()),
            requests: Some(3),
            ..Default::default()
        },
        serve: RawConfig {
            record_timeseries: Some(true),
            max_model_len,
            ..Default::default()
        },
        cluster: Default::default(),
    };
    let sc = raw.resolve().unwrap();
    sc.run(&sc.requests().unwrap()).unwrap()
}

#[test]
fn a_serving_run_writes_the_files_asked_for_in_order() {
    use kvplan_report::serve::{ServeFile as F, write_files};
    let dir = TempDir::new("serve-files");
    let out = served(None);
    let p = |n: &str| dir.path().join(n);
    let (csv, json, cdf) = (p("r.csv"), p("s.json"), p("cdf.svg"));
    let files = [
        (F::RequestsCsv, csv.as_path(), "the requests"),
        (F::SummaryJson, json.as_path(), "the summary"),
        (F::CdfPlot, cdf.as_path(), "the CDF"),
    ];
    let written = write_files(&out, "t", &files).unwrap();
    assert_eq!(
        written.iter().map(|w| w.0).collect::<Vec<_>>(),
        ["the requests", "the summary", "the CDF"]
    );
    assert_eq!(fs::read_to_string(&csv).unwrap().lines().count(), 4);
    let mut summary = Vec::new();
    out.write_summary_json(&mut summary).unwrap();
    assert_eq!(fs::read(&json).unwrap(), summary);
    assert!(fs::read_to_string(&cdf).unwrap().starts_with("<svg"));
}

#[test]
fn a_plot_that_cannot_be_drawn_leaves_no_file_behind() {
    use kvplan_report::serve::{ServeFile as F, write_files};
    let dir = TempDir::new("serve-noplot");
    let out = served(Some(16));
    assert_eq!(out.summary.finished, 0);
    let csv = dir.path().join("r.csv");
    let cdf = dir.path().join("cdf.svg");
    let files = [
        (F::RequestsCsv, csv.as_path(), "the requests"),
        (F::CdfPlot, cdf.as_path(), "the CDF"),
    ];
    let e = write_files(&out, "t", &files).unwrap_err();
    assert!(e.message().starts_with("the CDF"), "{e}");
    assert!(!csv.exists() && !cdf.exists());
}
