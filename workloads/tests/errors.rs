//! Every bad spec and bad trace row gives an error naming the field (or the file's 1-based line)
//! and what is accepted; none panics.

use kvplan_workloads::{
    ArrivalKind, Error, LengthSpec, MAX_ARRIVAL_S, MAX_THINK_S, MAX_TURNS, ReplayOptions,
    TimeScale, Trace, WorkloadConfig, generate,
};

use crate::{fixture, temp_file};

fn trace_err(name: &str, contents: &str) -> String {
    let path = temp_file(name, contents);
    let e = Trace::from_path(&path).unwrap_err();
    let text = e.to_string();
    assert!(text.contains(name), "error should name the file: {text}");
    text
}

const H: &str = "arrived_at,num_prefill_tokens,num_decode_tokens\n";

#[test]
fn bad_trace_rows_name_the_line() {
    // (file name, contents, expected line, words the message must contain)
    let cases: &[(&str, String, u64, &[&str])] = &[
        (
            "negative.csv",
            format!("{H}0,1,1\n-1.5,2,2\n"),
            3,
            &["arrived_at", "-1.5", "≥ 0"],
        ),
        (
            "unsorted.csv",
            format!("{H}0,1,1\n5,2,2\n4.5,3,3\n"),
            4,
            &["arrived_at", "earlier", "sorted"],
        ),
        (
            "zero_prompt.csv",
            format!("{H}0,1,1\n1,0,2\n"),
            3,
            &["num_prefill_tokens", "at least 1"],
        ),
        (
            "zero_decode.csv",
            format!("{H}0,1,0\n"),
            2,
            &["num_decode_tokens", "at least 1"],
        ),
        (
            "nan_time.csv",
            format!("{H}NaN,1,1\n"),
            2,
            &["arrived_at", "finite"],
        ),
        (
            "inf_time.csv",
            format!("{H}0,1,1\ninf,1,1\n"),
            3,
            &["arrived_at", "finite"],
        ),
        (
            "word_time.csv",
            format!("{H}0,1,1\n1,1,1\nsoon,1,1\n"),
            4,
            &["arrived_at", "soon", "not a number"],
        ),
        (
            "word_tokens.csv",
            format!("{H}0,many,1\n"),
            2,
            &["num_prefill_tokens", "many", "whole number"],
        ),
        (
            "float_tokens.csv",
            format!("{H}0,12.5,1\n"),
            2,
            &["num_prefill_tokens", "12.5"],
        ),
        (
            "neg_tokens.csv",
            format!("{H}0,1,-3\n"),
            2,
            &["num_decode_tokens", "-3"],
        ),
        (
            "huge_tokens.csv",
            format!("{H}0,99999999999,1\n"),
            2,
            &["num_prefill_tokens", "4294967295"],
        ),
        (
            "short_row.csv",
            format!("{H}0,1,1\n2,5\n"),
            3,
            &["2 field(s)", "needs 3"],
        ),
        (
            "missing_column.csv",
            "arrived_at,num_prefill_tokens\n0,1\n".into(),
            1,
            &[
                "missing column `num_decode_tokens`",
                "arrived_at,num_prefill_tokens,num_decode_tokens",
            ],
        ),
        (
            "no_header.csv",
            "0.0,374,44\n1.0,3,4\n".into(),
            1,
            &["missing column `arrived_at`"],
        ),
    ];
    for (name, contents, line, words) in cases {
        let path = temp_file(name, contents);
        let e = Trace::from_path(&path).unwrap_err();
        let text = e.to_string();
        match &e {
            Error::TraceRow { line: got, .. } => assert_eq!(got, line, "{name}: {text}"),
            other => panic!("{name}: expected a TraceRow error, got {other:?}"),
        }
        assert!(text.contains(&format!("{name}:{line}:")), "{name}: {text}");
        for w in *words {
            assert!(text.contains(w), "{name}: `{w}` missing from: {text}");
        }
    }
}

#[test]
fn empty_and_missing_traces() {
    let e = trace_err("empty.csv", "");
    assert!(e.contains("empty trace") && e.contains("no header"), "{e}");
    let e = trace_err("header_only.csv", H);
    assert!(e.contains("empty trace") && e.contains("no rows"), "{e}");
    let e = Trace::from_path("/nonexistent/kvplan/trace.csv").unwrap_err();
    assert!(matches!(e, Error::Io { .. }), "{e:?}");
    assert!(
        e.to_string().contains("/nonexistent/kvplan/trace.csv"),
        "{e}"
    );
    // Through a length spec too.
    let spec = crate::synthetic("poisson", Some(1.0), "trace:/nonexistent/x.csv", "1", 3);
    let e = generate(&spec, 0).unwrap_err();
    assert!(
        matches!(&e, Error::TraceFile { field: "prompt_lengths", source } if matches!(**source, Error::Io { .. })),
        "{e:?}"
    );
    assert!(
        e.to_string()
            .starts_with("prompt_lengths: /nonexistent/x.csv: "),
        "{e}"
    );
}

/// Parse `s` as `field`'s spec and check the error names the field and contains `words`.
fn spec_err(field: &str, e: Error, words: &[&str]) {
    let text = e.to_string();
    assert!(
        text.starts_with(&format!("{field}:")),
        "should name `{field}`: {text}"
    );
    for w in words {
        assert!(text.contains(w), "`{w}` missing from: {text}");
    }
}

#[test]
fn bad_arrival_specs() {
    for (s, words) in [
        (
            "uniform",
            &["`uniform`", "all-at-once", "poisson", "gamma:CV"][..],
        ),
        ("", &["all-at-once"][..]),
        ("poisson:3", &["poisson:3", "accepted forms"][..]),
        ("gamma:x:y", &["> 0"][..]),
    ] {
        let e = ArrivalKind::parse("arrivals", s).unwrap_err();
        let field = if s.starts_with("gamma") {
            "cv"
        } else {
            "arrivals"
        };
        spec_err(field, e, words);
    }
    for s in [
        "gamma:0",
        "gamma:-1",
        "gamma:NaN",
        "gamma:inf",
        "gamma:1000",
    ] {
        spec_err(
            "cv",
            ArrivalKind::parse("arrivals", s).unwrap_err(),
            &["> 0", "at most 100"],
        );
    }
}

fn config(arrivals: &str, qps: Option<f64>, cv: Option<f64>) -> WorkloadConfig {
    WorkloadConfig {
        arrivals: Some(arrivals.into()),
        qps,
        cv,
        prompt_lengths: Some("512".into()),
        output_lengths: Some("64".into()),
        requests: Some(10),
        ..Default::default()
    }
}

#[test]
fn bad_rates() {
    for q in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        spec_err(
            "qps",
            config("poisson", Some(q), None).validate().unwrap_err(),
            &["> 0"],
        );
        spec_err(
            "qps",
            config("gamma:2", Some(q), None).validate().unwrap_err(),
            &["> 0"],
        );
    }
    spec_err(
        "qps",
        config("poisson", None, None).validate().unwrap_err(),
        &["required"],
    );
    spec_err(
        "qps",
        config("all-at-once", Some(2.0), None)
            .validate()
            .unwrap_err(),
        &["not used"],
    );
    spec_err(
        "cv",
        config("poisson", Some(2.0), Some(2.0))
            .validate()
            .unwrap_err(),
        &["only used with gamma"],
    );
    spec_err(
        "cv",
        config("gamma", Some(2.0), None).validate().unwrap_err(),
        &["required", "gamma:CV"],
    );
    spec_err(
        "cv",
        config("gamma:2", Some(2.0), Some(3.0))
            .validate()
            .unwrap_err(),
        &["contradicts"],
    );
    spec_err(
        "cv",
        config("gamma", Some(2.0), Some(0.0))
            .validate()
            .unwrap_err(),
        &["> 0"],
    );
    spec_err(
        "cv",
        config("gamma", Some(2.0), Some(f64::NAN))
            .validate()
            .unwrap_err(),
        &["NaN"],
    );
    // Both ways of giving the CV agree → accepted.
    assert!(config("gamma:2", Some(2.0), Some(2.0)).validate().is_ok());
    assert!(config("gamma", Some(2.0), Some(2.0)).validate().is_ok());
}

#[test]
fn bad_length_specs() {
    let cases: &[(&str, &[&str])] = &[
        ("0", &["`0`", "1 to 4294967295"]),
        ("fixed:0", &["`0`", "1 to 4294967295"]),
        ("-5", &["`-5`", "whole number"]),
        ("99999999999", &["4294967295"]),
        ("12.5", &["12.5", "accepted forms"]),
        (
            "abc",
            &[
                "`abc`",
                "uniform:LO:HI",
                "zipf:LO:HI[:THETA]",
                "lognormal:MEDIAN:SIGMA",
                "trace:FILE",
            ],
        ),
        ("", &["accepted forms"]),
        ("uniform:1", &["accepted forms"]),
        ("uniform:1:2:3", &["accepted forms"]),
        ("uniform:10:5", &["LO = 10 > HI = 5"]),
        ("uniform:0:5", &["`0`"]),
        ("uniform:a:5", &["`a`", "whole number"]),
        ("zipf:512:100", &["LO = 512 > HI = 100"]),
        ("zipf:1:10:-1", &["THETA = -1", "≥ 0"]),
        ("zipf:1:10:nan", &["THETA = NaN"]),
        ("zipf:1:10:x", &["`x`", "THETA"]),
        ("lognormal:0:1", &["MEDIAN = 0", "> 0"]),
        ("lognormal:-5:1", &["MEDIAN = -5"]),
        ("lognormal:100:-1", &["SIGMA = -1"]),
        ("lognormal:100:inf", &["SIGMA = inf"]),
        ("lognormal:100:1:0", &["`0`"]),
        ("lognormal:100", &["accepted forms"]),
        ("trace:", &["accepted forms"]),
        ("normal:1:2", &["`normal:1:2`"]),
    ];
    for (s, words) in cases {
        let e = LengthSpec::parse("prompt_lengths", s).unwrap_err();
        spec_err("prompt_lengths", e, words);
        // Through the config, output lengths name their own field.
        let mut c = config("poisson", Some(1.0), None);
        c.output_lengths = Some((*s).into());
        spec_err("output_lengths", c.validate().unwrap_err(), words);
    }
}

#[test]
fn length_specs_parse_and_print_back() {
    for (s, want) in [
        ("512", LengthSpec::Fixed(512)),
        (" fixed:512 ", LengthSpec::Fixed(512)),
        (
            "uniform:128:1024",
            LengthSpec::Uniform { lo: 128, hi: 1024 },
        ),
        (
            "zipf:512:2048",
            LengthSpec::Zipf {
                lo: 512,
                hi: 2048,
                theta: 1.0,
            },
        ),
        (
            "zipf:512:2048:1.2",
            LengthSpec::Zipf {
                lo: 512,
                hi: 2048,
                theta: 1.2,
            },
        ),
        (
            "lognormal:1024:0.8",
            LengthSpec::LogNormal {
                median: 1024.0,
                sigma: 0.8,
                max: 1 << 20,
            },
        ),
        (
            "lognormal:1024:0.8:4096",
            LengthSpec::LogNormal {
                median: 1024.0,
                sigma: 0.8,
                max: 4096,
            },
        ),
        (
            "trace:C:/data/a.csv",
            LengthSpec::Trace("C:/data/a.csv".into()),
        ),
    ] {
        let got: LengthSpec = s.parse().unwrap();
        assert_eq!(got, want, "{s}");
        assert_eq!(got.to_string().parse::<LengthSpec>().unwrap(), want, "{s}");
    }
    assert_eq!(
        "all-at-once".parse::<ArrivalKind>().unwrap(),
        ArrivalKind::AllAtOnce
    );
    assert_eq!(
        "Poisson".parse::<ArrivalKind>().unwrap(),
        ArrivalKind::Poisson
    );
    assert_eq!(
        "gamma:2.5".parse::<ArrivalKind>().unwrap(),
        ArrivalKind::Gamma { cv: Some(2.5) }
    );
}

#[test]
fn missing_and_conflicting_fields() {
    let base = config("poisson", Some(1.0), None);
    for (field, c) in [
        (
            "arrivals",
            WorkloadConfig {
                arrivals: None,
                ..base.clone()
            },
        ),
        (
            "prompt_lengths",
            WorkloadConfig {
                prompt_lengths: None,
                ..base.clone()
            },
        ),
        (
            "output_lengths",
            WorkloadConfig {
                output_lengths: None,
                ..base.clone()
            },
        ),
        (
            "requests",
            WorkloadConfig {
                requests: None,
                ..base.clone()
            },
        ),
    ] {
        spec_err(field, c.validate().unwrap_err(), &["required"]);
    }
    for n in [0, 100_000_001] {
        let c = WorkloadConfig {
            requests: Some(n),
            ..base.clone()
        };
        spec_err("requests", c.validate().unwrap_err(), &["1 to 100000000"]);
    }
    for (field, c) in [
        (
            "time_scale",
            WorkloadConfig {
                time_scale: Some(2.0),
                ..base.clone()
            },
        ),
        (
            "start_s",
            WorkloadConfig {
                start_s: Some(2.0),
                ..base.clone()
            },
        ),
    ] {
        spec_err(
            field,
            c.validate().unwrap_err(),
            &["only used when replaying"],
        );
    }
    // Replay: fields that only synthetic workloads use.
    let replay = WorkloadConfig {
        trace: Some(fixture()),
        ..Default::default()
    };
    for (field, c) in [
        (
            "arrivals",
            WorkloadConfig {
                arrivals: Some("poisson".into()),
                ..replay.clone()
            },
        ),
        (
            "cv",
            WorkloadConfig {
                cv: Some(2.0),
                ..replay.clone()
            },
        ),
        (
            "prompt_lengths",
            WorkloadConfig {
                prompt_lengths: Some("5".into()),
                ..replay.clone()
            },
        ),
        (
            "output_lengths",
            WorkloadConfig {
                output_lengths: Some("5".into()),
                ..replay.clone()
            },
        ),
    ] {
        spec_err(
            field,
            c.validate().unwrap_err(),
            &["not used when replaying"],
        );
    }
    let both = WorkloadConfig {
        qps: Some(1.0),
        time_scale: Some(2.0),
        ..replay.clone()
    };
    spec_err("time_scale", both.validate().unwrap_err(), &["not both"]);
    for f in [0.0, -1.0, f64::NAN] {
        let c = WorkloadConfig {
            time_scale: Some(f),
            ..replay.clone()
        };
        spec_err("time_scale", c.validate().unwrap_err(), &["> 0"]);
    }
    for s in [-1.0, f64::INFINITY] {
        let c = WorkloadConfig {
            start_s: Some(s),
            ..replay.clone()
        };
        spec_err("start_s", c.validate().unwrap_err(), &["≥ 0"]);
    }
    let c = WorkloadConfig {
        requests: Some(0),
        ..replay.clone()
    };
    spec_err("requests", c.validate().unwrap_err(), &["1 to"]);
    // Unknown TOML keys are refused.
    let e = toml::from_str::<WorkloadConfig>("arrivals = 'poisson'\nrate = 3").unwrap_err();
    assert!(e.to_string().contains("rate"), "{e}");
}

#[test]
fn impossible_replays() {
    let t = Trace::from_path(fixture()).unwrap();
    let e = t
        .replay(&ReplayOptions {
            start_s: 11.0,
            ..Default::default()
        })
        .unwrap_err();
    spec_err(
        "start_s",
        e,
        &["no requests at or after 11 s", "ends at 10 s"],
    );
    // One request, or all at one time: no rate to scale.
    let e = t
        .replay(&ReplayOptions {
            scale: TimeScale::TargetQps(3.0),
            max_requests: Some(1),
            ..Default::default()
        })
        .unwrap_err();
    spec_err("qps", e, &["cannot scale to a rate"]);
    let e = t
        .replay(&ReplayOptions {
            scale: TimeScale::TargetQps(3.0),
            start_s: 1.0,
            max_requests: Some(2),
        })
        .unwrap_err();
    spec_err("qps", e, &["all arrive at 1.5 s"]);
}

/// Arrivals past [`MAX_ARRIVAL_S`] (2^32 s) are refused by the field that puts them there: the
/// simulated clock's step there passes the microsecond the reports print.
#[test]
fn arrivals_beyond_the_clock_are_refused() {
    assert_eq!(MAX_ARRIVAL_S, 2f64.powi(32));
    // The step of f64 seconds just below the bound is under a microsecond, just past it not.
    assert!(MAX_ARRIVAL_S - MAX_ARRIVAL_S.next_down() < 1e-6);
    assert!(MAX_ARRIVAL_S.next_up() - MAX_ARRIVAL_S < 1e-6);
    assert!((2.0 * MAX_ARRIVAL_S).next_up() - 2.0 * MAX_ARRIVAL_S > 1e-6);
    // 10 requests: a mean span of 10 / qps.
    let at = 10.0 / MAX_ARRIVAL_S;
    for arrivals in ["poisson", "gamma:2"] {
        assert!(config(arrivals, Some(at), None).validate().is_ok());
        for q in [at * 0.99, 1e-300] {
            spec_err(
                "qps",
                config(arrivals, Some(q), None).validate().unwrap_err(),
                &["10 requests", "at least 2.328e-9"],
            );
        }
    }
    // Conversations: their starts, and the think time of up to MAX_TURNS turns.
    let conv = |qps: f64, think: &str| WorkloadConfig {
        arrivals: Some("poisson".into()),
        qps: Some(qps),
        output_lengths: Some("64".into()),
        conversation: Some(kvplan_workloads::ConversationConfig {
            conversations: Some(10),
            turns: Some("uniform:1:4".into()),
            first_message_len: Some("100".into()),
            message_len: Some("20".into()),
            think_time_s: Some(think.into()),
            max_context: None,
        }),
        ..Default::default()
    };
    assert!(conv(at, "exp:5").validate().is_ok());
    spec_err(
        "qps",
        conv(at * 0.99, "exp:5").validate().unwrap_err(),
        &["10 conversations"],
    );
    assert_eq!(MAX_THINK_S, MAX_ARRIVAL_S / f64::from(MAX_TURNS));
    for think in [
        "fixed:4294967.296",
        "exp:4294967.296",
        "uniform:0:4294967.296",
    ] {
        assert!(conv(1.0, think).validate().is_ok(), "{think}");
    }
    for think in ["fixed:4294968", "exp:1e300", "uniform:0:4294968"] {
        spec_err(
            "conversation.think_time_s",
            conv(1.0, think).validate().unwrap_err(),
            &["at most 4294967.296 s"],
        );
    }
    // Replays: absolute timestamps (2026 in Unix time) are within the bound; scaled past it or
    // a trace that starts past it is refused by the field that does it.
    let path = temp_file(
        "epoch.csv",
        &format!("{H}1764000000,10,10\n1764000010,10,10\n"),
    );
    let t = Trace::from_path(&path).unwrap();
    let r = t.replay(&ReplayOptions::default()).unwrap();
    assert_eq!(r[1].arrival_s, 1_764_000_010.0);
    for (scale, field) in [
        (TimeScale::Factor(3.0), "time_scale"),
        (TimeScale::TargetQps(1e-10), "qps"),
    ] {
        let e = t
            .replay(&ReplayOptions {
                scale,
                ..Default::default()
            })
            .unwrap_err();
        spec_err(field, e, &["epoch.csv", "loses its microseconds"]);
    }
    let path = temp_file("far.csv", &format!("{H}5e9,10,10\n5.1e9,10,10\n"));
    let t = Trace::from_path(&path).unwrap();
    spec_err(
        "start_s",
        t.replay(&ReplayOptions::default()).unwrap_err(),
        &["5.100e9 s", "start_s near the trace's first arrival"],
    );
    let r = t
        .replay(&ReplayOptions {
            start_s: 5e9,
            ..Default::default()
        })
        .unwrap();
    assert_eq!(r[1].arrival_s, 1e8);
}
