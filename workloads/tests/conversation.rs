//! Multi-turn conversations: each turn's prompt is the conversation so far plus a new message,
//! and each later turn follows the previous one (closed loop, with a think time).

use std::collections::HashMap;

use kvplan_workloads::{Request, Segment, ThinkTime, fnv1a_64, generate};

use crate::{validate_err, workload};

const BASE: &str = r#"
arrivals = "poisson"
qps = 2.0
output_lengths = "uniform:20:300"
[conversation]
conversations = 200
turns = "uniform:1:8"
first_message_len = "uniform:200:800"
message_len = "uniform:10:120"
think_time_s = "exp:4"
"#;

fn requests(text: &str, seed: u64) -> Vec<Request> {
    generate(&workload(text).validate().unwrap(), seed).unwrap()
}

/// The conversation a request belongs to: the id of its first message.
fn conversation(r: &Request) -> u64 {
    r.segments()[0].id
}

/// Turn number (1-based): turn k's prefix has 2k - 1 segments.
fn turn(r: &Request) -> usize {
    r.segments().len().div_ceil(2)
}

/// Requests grouped by conversation, each in turn order.
fn by_conversation(r: &[Request]) -> HashMap<u64, Vec<&Request>> {
    let mut map: HashMap<u64, Vec<&Request>> = HashMap::new();
    for q in r {
        map.entry(conversation(q)).or_default().push(q);
    }
    for turns in map.values_mut() {
        turns.sort_by_key(|q| turn(q));
    }
    map
}

/// Turn k+1's prompt is turn k's prompt, its answer and one new message; its prefix starts with
/// turn k's prefix followed by turn k's answer segment; it follows turn k by its think time.
#[test]
fn each_turn_extends_the_previous_one() {
    let r = requests(BASE, 3);
    let mut followers = 0;
    for (i, q) in r.iter().enumerate() {
        assert_eq!(q.id, i as u64);
        assert_eq!(
            q.prefix_tokens(),
            q.prompt_tokens,
            "the prefix covers the prompt"
        );
        let Some(f) = q.follows else {
            assert_eq!(turn(q), 1, "{q:?}");
            continue;
        };
        followers += 1;
        assert!(f.request < q.id);
        let prev = &r[f.request as usize];
        let (a, b) = (prev.segments(), q.segments());
        assert_eq!(b.len(), a.len() + 2);
        assert_eq!(
            &b[..a.len()],
            a,
            "turn {} starts with turn {}",
            turn(q),
            turn(prev)
        );
        assert_eq!(
            b[a.len()],
            Segment::new(prev.output_segment.unwrap(), prev.output_tokens)
        );
        let message = b[a.len() + 1].len;
        assert!((10..=120).contains(&message));
        assert_eq!(
            q.prompt_tokens,
            prev.prompt_tokens + prev.output_tokens + message
        );
        assert_eq!(q.arrival_s, prev.arrival_s + f.think_s, "nominal arrival");
    }
    assert!(r.windows(2).all(|w| w[0].arrival_s <= w[1].arrival_s));
    assert!(followers > r.len() / 2, "{followers} of {}", r.len());
    // Prompt growth in closed form: turn k's prompt is the sum of every earlier message and
    // answer plus its own message.
    for turns in by_conversation(&r).values() {
        let mut context = 0;
        for q in turns {
            let message = q.segments().last().unwrap().len;
            assert_eq!(q.prompt_tokens, context + message);
            context += message + q.output_tokens;
        }
    }
}

#[test]
fn fixed_turns_give_every_conversation_its_turns_and_names() {
    let text = BASE
        .replace("turns = \"uniform:1:8\"", "turns = \"5\"")
        .replace("conversations = 200", "conversations = 30");
    let r = requests(&text, 4);
    assert_eq!(r.len(), 30 * 5);
    let convs = by_conversation(&r);
    assert_eq!(convs.len(), 30);
    for turns in convs.values() {
        assert_eq!(turns.len(), 5);
        for (k, q) in turns.iter().enumerate() {
            assert_eq!(turn(q), k + 1);
            // Every answer but the last is shared by the next turn.
            assert_eq!(q.output_segment.is_some(), k < 4);
        }
    }
    // Conversation 0 is the first to start; its first turn is request 0, named as documented.
    assert_eq!(
        r[0].segments(),
        [Segment::new(
            fnv1a_64(b"conversation.0.message.1"),
            r[0].prompt_tokens
        )]
    );
    assert_eq!(
        r[0].output_segment,
        Some(fnv1a_64(b"conversation.0.answer.1"))
    );
}

/// `max_context` ends conversations early and changes nothing else: every capped conversation is
/// the start of the uncapped one, each later turn fits, and the first turn dropped would not.
#[test]
fn max_context_truncates_conversations() {
    let cap = 1200;
    let capped = requests(&format!("{BASE}max_context = {cap}\n"), 5);
    let full = requests(BASE, 5);
    assert!(capped.len() < full.len());
    let (c, f) = (by_conversation(&capped), by_conversation(&full));
    assert_eq!(c.len(), f.len(), "every conversation keeps its first turn");
    let mut truncated = 0;
    for (id, turns) in &c {
        let whole = &f[id];
        for (a, b) in turns.iter().zip(whole) {
            assert_eq!(
                (a.segments(), a.prompt_tokens, a.output_tokens, a.arrival_s),
                (b.segments(), b.prompt_tokens, b.output_tokens, b.arrival_s)
            );
        }
        for q in &turns[1..] {
            assert!(q.prompt_tokens + q.output_tokens <= cap, "{q:?}");
        }
        assert_eq!(turns.last().unwrap().output_segment, None);
        if turns.len() < whole.len() {
            truncated += 1;
            let next = whole[turns.len()];
            assert!(next.prompt_tokens + next.output_tokens > cap, "{next:?}");
        }
    }
    assert!(truncated > 0);
}

/// `requests` keeps the first requests in arrival order: the start of the uncapped workload.
#[test]
fn requests_caps_in_arrival_order() {
    let full = requests(BASE, 6);
    let r = requests(
        &BASE.replace("[conversation]", "requests = 100\n[conversation]"),
        6,
    );
    assert_eq!(r[..], full[..100]);
}

#[test]
fn think_times_follow_their_spec() {
    let gaps = |text: &str| -> Vec<f64> {
        requests(text, 8)
            .iter()
            .filter_map(|q| q.follows.map(|f| f.think_s))
            .collect()
    };
    let fixed = gaps(&BASE.replace("exp:4", "1.5"));
    assert!(!fixed.is_empty() && fixed.iter().all(|&t| t == 1.5));
    let uniform = gaps(&BASE.replace("exp:4", "uniform:2:3"));
    assert!(uniform.iter().all(|t| (2.0..=3.0).contains(t)));
    // Exponential with mean 4 s: the sample mean of ~700 draws within 15% (4 standard errors).
    let exp = gaps(BASE);
    assert!(exp.len() > 500, "{}", exp.len());
    let mean = exp.iter().sum::<f64>() / exp.len() as f64;
    assert!((mean - 4.0).abs() < 0.6, "mean think time {mean}");
}

#[test]
fn same_seed_same_requests_other_seed_differs() {
    assert_eq!(requests(BASE, 9), requests(BASE, 9));
    assert_ne!(requests(BASE, 9), requests(BASE, 10));
    // All at once: every conversation starts at 0.
    let r = requests(
        &BASE.replace(
            "arrivals = \"poisson\"\nqps = 2.0",
            "arrivals = \"all-at-once\"",
        ),
        9,
    );
    assert!(
        r.iter()
            .filter(|q| q.follows.is_none())
            .all(|q| q.arrival_s == 0.0)
    );
}

#[test]
fn think_time_specs_parse_and_print_back() {
    for (s, want) in [
        ("2.5", ThinkTime::Fixed(2.5)),
        ("0", ThinkTime::Fixed(0.0)),
        ("fixed:3", ThinkTime::Fixed(3.0)),
        ("exp:4", ThinkTime::Exponential { mean: 4.0 }),
        ("exponential:0.5", ThinkTime::Exponential { mean: 0.5 }),
        ("uniform:1:2", ThinkTime::Uniform { lo: 1.0, hi: 2.0 }),
    ] {
        let got = ThinkTime::parse("think", s).unwrap();
        assert_eq!(got, want, "{s}");
        assert_eq!(ThinkTime::parse("think", &got.to_string()).unwrap(), want);
    }
}

#[test]
fn bad_conversation_tables_name_the_field() {
    for (text, field, words) in [
        (
            BASE.replace("conversations = 200\n", ""),
            "conversation.conversations",
            &["required"][..],
        ),
        (
            BASE.replace("conversations = 200", "conversations = 0"),
            "conversation.conversations",
            &["1 to 100000000"][..],
        ),
        (
            BASE.replace("turns = \"uniform:1:8\"\n", ""),
            "conversation.turns",
            &["required"][..],
        ),
        (
            BASE.replace("uniform:1:8", "trace:x.csv"),
            "conversation.turns",
            &["not turns"][..],
        ),
        (
            BASE.replace("uniform:1:8", "0"),
            "conversation.turns",
            &["whole number of turns"][..],
        ),
        (
            BASE.replace("uniform:1:8", "uniform:0:3"),
            "conversation.turns",
            &["`0`", "whole number of turns"][..],
        ),
        (
            BASE.replace(
                "message_len = \"uniform:10:120\"",
                "message_len = \"uniform:0:3\"",
            ),
            "conversation.message_len",
            &["`0`", "whole number of tokens"][..],
        ),
        (
            BASE.replace("uniform:1:8", "uniform:1:5000"),
            "conversation.turns",
            &["up to 5000 turns", "at most 1000"][..],
        ),
        (
            BASE.replace("uniform:1:8", "1000")
                .replace("conversations = 200", "conversations = 200000"),
            "conversation.conversations",
            &[
                "200000 conversations of up to 1000 turns",
                "100000000 requests",
            ][..],
        ),
        (
            BASE.replace("first_message_len = \"uniform:200:800\"\n", ""),
            "conversation.first_message_len",
            &["required"][..],
        ),
        (
            BASE.replace("message_len = \"uniform:10:120\"", "message_len = \"0\""),
            "conversation.message_len",
            &["`0`"][..],
        ),
        (
            BASE.replace("think_time_s = \"exp:4\"\n", ""),
            "conversation.think_time_s",
            &["required", "exp:MEAN"][..],
        ),
        (
            BASE.replace("exp:4", "exp:0"),
            "conversation.think_time_s",
            &["MEAN > 0"][..],
        ),
        (
            BASE.replace("exp:4", "-1"),
            "conversation.think_time_s",
            &["seconds ≥ 0"][..],
        ),
        (
            BASE.replace("exp:4", "uniform:3:1"),
            "conversation.think_time_s",
            &["LO ≤ HI"][..],
        ),
        (
            BASE.replace("exp:4", "soon"),
            "conversation.think_time_s",
            &["`soon`", "accepted forms"][..],
        ),
        (
            format!("{BASE}max_context = 0\n"),
            "conversation.max_context",
            &["1 to 4294967295"][..],
        ),
        (
            format!("{BASE}max_context = 4294967296\n"),
            "conversation.max_context",
            &["4294967296"][..],
        ),
        (
            BASE.replace("[conversation]", "prompt_lengths = \"5\"\n[conversation]"),
            "prompt_lengths",
            &["not used with `[workload.conversation]`"][..],
        ),
        (
            BASE.replace("[conversation]", "requests = 0\n[conversation]"),
            "requests",
            &["1 to 100000000"][..],
        ),
        (
            BASE.replace("arrivals = \"poisson\"\nqps = 2.0\n", "trace = \"t.csv\"\n")
                .replace("output_lengths = \"uniform:20:300\"\n", ""),
            "conversation",
            &["not used when replaying a trace"][..],
        ),
    ] {
        let e = validate_err(&text);
        assert!(
            e.starts_with(&format!("{field}: ")),
            "should name `{field}`: {e}"
        );
        for w in words {
            assert!(e.contains(w), "`{w}` missing from: {e}");
        }
    }
    let e = toml::from_str::<kvplan_workloads::WorkloadConfig>(
        &BASE.replace("think_time_s", "think_s"),
    )
    .unwrap_err();
    assert!(e.to_string().contains("think_s"), "{e}");
}
