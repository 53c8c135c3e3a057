//! Token identity in traces: the `prefix`, `output_id`, `follows` and `think_s` columns, their
//! errors (each naming file:line and the column), and the CSV round trip.

use std::sync::Arc;

use kvplan_workloads::{
    Error, Follows, ReplayOptions, Request, Segment, TimeScale, Trace, fnv1a_64, format_prefix,
    format_segment_id, generate, parse_prefix, segment_id, write_csv,
};
use proptest::prelude::*;

use crate::{temp_file, workload};

fn csv(r: &[Request]) -> String {
    let mut out = Vec::new();
    write_csv(r, &mut out).unwrap();
    String::from_utf8(out).unwrap()
}

fn read_back(text: &str) -> Vec<Request> {
    Trace::from_reader(text.as_bytes(), "round-trip.csv")
        .unwrap()
        .replay(&ReplayOptions::default())
        .unwrap()
}

#[test]
fn prefix_chains_parse_and_print_back() {
    let chain = parse_prefix("s3:105/u17:488").unwrap();
    assert_eq!(
        chain,
        [
            Segment::new(fnv1a_64(b"s3"), 105),
            Segment::new(fnv1a_64(b"u17"), 488)
        ]
    );
    let text = format_prefix(&chain);
    assert_eq!(
        text,
        format!(
            "{}:105/{}:488",
            format_segment_id(fnv1a_64(b"s3")),
            format_segment_id(fnv1a_64(b"u17"))
        )
    );
    assert_eq!(parse_prefix(&text).unwrap(), chain);
    assert_eq!(parse_prefix("").unwrap(), []);
    assert_eq!(
        parse_prefix("#000000000000002a:1/sys.prompt_v-2:7").unwrap(),
        [
            Segment::new(42, 1),
            Segment::new(segment_id("sys.prompt_v-2").unwrap(), 7)
        ]
    );
}

#[test]
fn bad_prefix_chains_name_the_segment() {
    for (chain, words) in [
        ("s3:105//u1:3", &["segment 2 is empty"][..]),
        ("s3:105/", &["segment 2 is empty"][..]),
        ("s3", &["segment 1 `s3` has no `:LEN`", "ID:LEN"][..]),
        (
            "s3:0",
            &["segment 1 `s3:0`", "LEN `0`", "1 to 4294967295"][..],
        ),
        ("s3:1/u:-4", &["segment 2 `u:-4`", "LEN `-4`"][..]),
        ("s3:1/u:4.5", &["segment 2", "LEN `4.5`"][..]),
        (
            "s 3:1",
            &["segment 1", "character ` `", "letters, digits"][..],
        ),
        ("a:b:3", &["segment 1", "character `:`"][..]),
        (
            "#12ab:3",
            &["segment 1", "exactly 16 hex digits", "got 4"][..],
        ),
        (":3", &["segment 1", "empty segment name"][..]),
    ] {
        let e = parse_prefix(chain).unwrap_err();
        assert!(matches!(e, Error::BadSegment { .. }), "{chain}: {e:?}");
        let text = e.to_string();
        assert!(text.starts_with("prefix: "), "{chain}: {text}");
        for w in words {
            assert!(text.contains(w), "{chain}: `{w}` missing from: {text}");
        }
    }
}

const H: &str = "arrived_at,num_prefill_tokens,num_decode_tokens";

#[test]
fn bad_identity_cells_name_file_line_and_column() {
    // (file, contents, line, words)
    let cases: &[(&str, String, u64, &[&str])] = &[
        (
            "prefix_empty_segment.csv",
            format!("{H},prefix\n0,10,1,s:3\n1,10,1,s:3//q:2\n"),
            3,
            &["prefix:", "segment 2 is empty", "fix the cell"],
        ),
        (
            "prefix_zero_len.csv",
            format!("{H},prefix\n0,10,1,s:0\n"),
            2,
            &["prefix:", "segment 1 `s:0`", "LEN `0`"],
        ),
        (
            "prefix_bad_name.csv",
            format!("{H},prefix\n0,10,1,s!:3\n"),
            2,
            &["prefix:", "character `!`", "letters, digits"],
        ),
        (
            "prefix_short_hex.csv",
            format!("{H},prefix\n0,10,1,#abc:3\n"),
            2,
            &["prefix:", "16 hex digits"],
        ),
        (
            "prefix_too_long.csv",
            format!("{H},prefix\n0,10,1,s:3\n1,10,1,s:6/q:5\n"),
            3,
            &[
                "prefix:",
                "sum to 11 tokens",
                "num_prefill_tokens = 10",
                "shorten the segments or raise num_prefill_tokens",
            ],
        ),
        (
            "output_id_bad.csv",
            format!("{H},output_id\n0,10,1,a/b\n"),
            2,
            &["output_id:", "`a/b`", "character `/`"],
        ),
        (
            "follows_without_think.csv",
            format!("{H},follows,think_s\n0,10,1,,\n1,10,1,0,\n"),
            3,
            &["think_s: missing", "follows = `0`"],
        ),
        (
            "think_without_follows.csv",
            format!("{H},follows,think_s\n0,10,1,,2.5\n"),
            2,
            &["follows: missing", "think_s = `2.5`", "0-based data row"],
        ),
        (
            "follows_later_row.csv",
            format!("{H},follows,think_s\n0,10,1,,\n1,10,1,1,0.5\n"),
            3,
            &["follows: `1` is not an earlier row", "this row is 1"],
        ),
        (
            "think_negative.csv",
            format!("{H},follows,think_s\n0,10,1,,\n1,10,1,0,-1\n"),
            3,
            &["think_s: `-1`", "≥ 0"],
        ),
        (
            "short_identity_row.csv",
            format!("{H},prefix,output_id\n0,10,1\n"),
            2,
            &["3 field(s)", "needs 5"],
        ),
        (
            "missing_required_lists_optional.csv",
            "arrived_at,prefix\n0,s:1\n".into(),
            1,
            &[
                "missing column `num_prefill_tokens`",
                "optional columns: `prefix`, `output_id`, `follows`, `think_s`",
            ],
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
        assert!(text.contains(&format!("{name}:{line}: ")), "{name}: {text}");
        for w in *words {
            assert!(text.contains(w), "{name}: `{w}` missing from: {text}");
        }
    }
}

#[test]
fn identity_columns_read_in_any_order_and_share_chains() {
    let text = format!(
        "think_s,{H},output_id,follows,prefix\n\
         ,0,10,4,a0,,sys:6/u1:4\n\
         ,0.5,9,2,,,sys:6\n\
         1.5,2,20,3,,0,sys:6/u1:4/#{:016x}:4/m2:6\n\
         ,3,10,1,,,sys:6/u1:4\n",
        fnv1a_64(b"a0")
    );
    let t = Trace::from_reader(text.as_bytes(), "ordered.csv").unwrap();
    let rows = t.rows();
    assert_eq!(rows[0].output_segment, Some(fnv1a_64(b"a0")));
    assert_eq!(rows[1].prefix.as_deref().unwrap().len(), 1);
    assert_eq!(
        rows[2].follows,
        Some(Follows {
            request: 0,
            think_s: 1.5
        })
    );
    let chain2 = rows[2].prefix.as_deref().unwrap();
    assert_eq!(chain2[2], Segment::new(fnv1a_64(b"a0"), 4));
    // Rows 0 and 3 have the same cell: one allocation.
    assert!(Arc::ptr_eq(
        rows[0].prefix.as_ref().unwrap(),
        rows[3].prefix.as_ref().unwrap()
    ));
    let r = t.replay(&ReplayOptions::default()).unwrap();
    assert_eq!(r[0].prefix_tokens(), 10);
    assert_eq!(r[2].prefix_tokens(), 20);
    assert_eq!(r[1].segments().len(), 1);

    // Starting after row 0: row 2 no longer follows a replayed request; time and think
    // scaling go together.
    let late = t
        .replay(&ReplayOptions {
            start_s: 0.5,
            scale: TimeScale::Factor(2.0),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(late.len(), 3);
    assert_eq!(late[1].follows, None);
    assert_eq!(late[1].arrival_s, 3.0);
    let all = t
        .replay(&ReplayOptions {
            scale: TimeScale::Factor(2.0),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(
        all[2].follows,
        Some(Follows {
            request: 0,
            think_s: 3.0
        })
    );
}

/// Requests with neither prefixes nor follow-ups are written with the three columns only.
#[test]
fn identity_columns_are_written_only_when_used() {
    let plain = vec![Request::new(0, 0.0, 5, 1), Request::new(1, 0.25, 6, 2)];
    assert_eq!(csv(&plain), format!("{H}\n0,5,1\n0.25,6,2\n"));
    let mut with_output = plain.clone();
    with_output[0].output_segment = Some(255);
    assert_eq!(
        csv(&with_output),
        format!("{H},prefix,output_id\n0,5,1,,#00000000000000ff\n0.25,6,2,,\n")
    );
    let mut follow = plain.clone();
    follow[1].follows = Some(Follows {
        request: 0,
        think_s: 0.125,
    });
    assert_eq!(
        csv(&follow),
        format!("{H},follows,think_s\n0,5,1,,\n0.25,6,2,0,0.125\n")
    );
    assert_eq!(read_back(&csv(&follow)), follow);
    // A follow-up of a request not written before it cannot be written.
    let mut dangling = plain;
    dangling[0].follows = Some(Follows {
        request: 1,
        think_s: 0.0,
    });
    let mut out = Vec::new();
    let e = write_csv(&dangling, &mut out).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
    assert!(e.to_string().contains("request 0 follows request 1"), "{e}");
}

#[test]
fn generated_workloads_round_trip_through_csv() {
    for text in [
        r#"
arrivals = "gamma:2"
qps = 7.0
output_lengths = "zipf:1:300"
requests = 500
[shared_prefix]
groups = 5
users_per_group = 7
system_prompt_len = "uniform:50:150"
question_len = "lognormal:300:0.5"
"#,
        r#"
arrivals = "poisson"
qps = 3.0
output_lengths = "uniform:10:200"
[conversation]
conversations = 40
turns = "uniform:1:6"
first_message_len = "uniform:100:400"
message_len = "uniform:5:60"
think_time_s = "exp:2.5"
max_context = 2000
"#,
    ] {
        let config = workload(text);
        let r = generate(&config.validate().unwrap(), 11).unwrap();
        assert!(r.iter().all(|q| q.prefix.is_some()), "{text}");
        let back = read_back(&csv(&r));
        assert_eq!(back, r, "{text}");
    }
}

fn arb_request() -> impl Strategy<Value = (f64, u32, u32, Vec<(u64, u32)>, Option<u64>)> {
    (
        0.0f64..1e6,
        1u32..100_000,
        1u32..10_000,
        prop::collection::vec((any::<u64>(), 1u32..2000), 0..5),
        prop::option::of(any::<u64>()),
    )
}

proptest! {
    #![proptest_config(crate::props::config(256))]
    /// Any requests (sorted by arrival, ids 0..n, prefixes within the prompt, follow-ups of
    /// earlier requests) are written and read back exactly.
    #[test]
    fn csv_round_trip(
        rows in prop::collection::vec(
            (arb_request(), prop::option::of((any::<prop::sample::Index>(), 0.0f64..1e4))),
            1..40,
        )
    ) {
        let mut t = 0.0;
        let mut requests = Vec::new();
        for (i, ((gap, prompt, output, segments, out_id), follow)) in rows.into_iter().enumerate() {
            t += gap;
            let chain: Vec<Segment> = segments
                .into_iter()
                .map(|(id, len)| Segment::new(id, len))
                .scan(0u64, |sum, s| {
                    *sum += u64::from(s.len);
                    (*sum <= u64::from(prompt)).then_some(s)
                })
                .collect();
            let mut r = Request::new(i as u64, t, prompt, output);
            r.prefix = (!chain.is_empty()).then(|| chain.into());
            r.output_segment = out_id;
            r.follows = match follow {
                Some((earlier, think)) if i > 0 => Some(Follows {
                    request: earlier.index(i) as u64,
                    think_s: think,
                }),
                _ => None,
            };
            requests.push(r);
        }
        let text = csv(&requests);
        prop_assert_eq!(read_back(&text), requests);
    }
}
