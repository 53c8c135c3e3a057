//! inference-perf's shared-prefix data: `groups` system prompts × `users_per_group` users, each
//! user's prompt fixed, cycling with period `groups × users_per_group`.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use kvplan_workloads::{Request, SharedPrefixSpec, WorkloadSpec, fnv1a_64, generate, segment_id};

use crate::{synthetic, validate_err, workload};

fn config(groups: u64, users: u64, system: &str, question: &str, output: &str, n: u64) -> String {
    format!(
        r#"
arrivals = "poisson"
qps = 5.0
output_lengths = "{output}"
requests = {n}
[shared_prefix]
groups = {groups}
users_per_group = {users}
system_prompt_len = "{system}"
question_len = "{question}"
"#
    )
}

fn requests(text: &str, seed: u64) -> Vec<Request> {
    generate(&workload(text).validate().unwrap(), seed).unwrap()
}

#[test]
fn the_toml_table_validates_to_the_spec() {
    let spec = workload(&config(11, 4, "100", "466", "300", 2000))
        .validate()
        .unwrap();
    let WorkloadSpec::SharedPrefix(SharedPrefixSpec {
        groups,
        users_per_group,
        requests,
        ..
    }) = spec
    else {
        panic!("expected a shared-prefix spec, got {spec:?}");
    };
    assert_eq!((groups, users_per_group, requests), (11, 4, 2000));
}

/// Request `i + G·U` has request `i`'s prompt (the same chain, shared, and the same lengths);
/// every window of `G·U` consecutive requests holds every user once.
#[test]
fn prompts_repeat_with_period_groups_times_users() {
    for (g, u, seed) in [(11, 4, 1), (3, 1, 2), (1, 5, 3), (7, 9, 4)] {
        let period = (g * u) as usize;
        let r = requests(
            &config(g, u, "100", "uniform:200:700", "uniform:1:400", 1000),
            seed,
        );
        assert_eq!(r.len(), 1000);
        for i in 0..r.len() - period {
            let (a, b) = (&r[i], &r[i + period]);
            assert!(
                Arc::ptr_eq(a.prefix.as_ref().unwrap(), b.prefix.as_ref().unwrap()),
                "G={g} U={u}: requests {i} and {} should share one chain",
                i + period
            );
            assert_eq!(
                (a.prompt_tokens, a.output_tokens),
                (b.prompt_tokens, b.output_tokens)
            );
        }
        for w in r.windows(period) {
            let users: HashSet<&[_]> = w.iter().map(|q| q.segments()).collect();
            assert_eq!(users.len(), period, "G={g} U={u}: a window repeats a user");
        }
    }
}

/// The number of distinct (group, user) prompts in the first N requests is min(N, G·U), for N
/// below, at and above the period; the chains are allocated once per user.
#[test]
fn distinct_prompts_in_n_requests_is_min_n_users() {
    let (g, u) = (6, 5);
    let all = requests(&config(g, u, "64", "uniform:1:2000", "8", 97), 5);
    for n in [1, 2, 29, 30, 31, 60, 97] {
        let r = requests(&config(g, u, "64", "uniform:1:2000", "8", n), 5);
        // A shorter run is the start of a longer one.
        assert_eq!(r[..], all[..n as usize]);
        let chains: HashSet<Vec<_>> = r.iter().map(|q| q.segments().to_vec()).collect();
        assert_eq!(chains.len() as u64, n.min(g * u), "N = {n}");
        let allocations: HashSet<*const _> = r
            .iter()
            .map(|q| Arc::as_ptr(q.prefix.as_ref().unwrap()))
            .collect();
        assert_eq!(allocations.len(), chains.len(), "N = {n}");
    }
}

/// Each prompt is `[system_g, question_{g,u}]` covering the whole prompt; the G system prompts
/// are shared by U users each; lengths come from their specs.
#[test]
fn prompts_are_a_group_system_prompt_plus_a_user_question() {
    let (g, u) = (4u64, 3u64);
    let r = requests(
        &config(g, u, "uniform:90:110", "uniform:400:500", "fixed:77", 120),
        9,
    );
    let mut users_of: HashMap<u64, HashSet<u64>> = HashMap::new();
    let mut system_len: HashMap<u64, u32> = HashMap::new();
    for q in &r {
        let [system, question] = q.segments() else {
            panic!("expected two segments: {q:?}");
        };
        assert_eq!(q.prefix_tokens(), q.prompt_tokens);
        assert_eq!(q.prompt_tokens, system.len + question.len);
        assert!((90..=110).contains(&system.len) && (400..=500).contains(&question.len));
        assert_eq!(q.output_tokens, 77);
        assert_eq!(q.output_segment, None);
        assert_eq!(q.follows, None);
        // A group's system prompt has one length.
        assert_eq!(
            *system_len.entry(system.id).or_insert(system.len),
            system.len
        );
        users_of.entry(system.id).or_default().insert(question.id);
    }
    assert_eq!(users_of.len() as u64, g);
    for (gi, users) in users_of.values().enumerate() {
        assert_eq!(users.len() as u64, u, "group {gi}");
    }
    // Ids are the documented names' hashes.
    let expected: HashSet<u64> = (0..g)
        .map(|i| segment_id(&format!("shared_prefix.system.{i}")).unwrap())
        .collect();
    assert_eq!(users_of.keys().copied().collect::<HashSet<_>>(), expected);
    let q00 = fnv1a_64(b"shared_prefix.question.0.0");
    assert!(r.iter().any(|q| q.segments()[1].id == q00));
}

/// Arrivals are the ordinary arrival process on its own stream: the same times as a synthetic
/// workload with the same arrivals and seed.
#[test]
fn arrivals_are_the_synthetic_arrival_process() {
    let text = config(2, 2, "10", "10", "10", 300).replace("poisson", "gamma:2");
    let r = requests(&text, 13);
    let s = generate(&synthetic("gamma:2", Some(5.0), "1", "1", 300), 13).unwrap();
    for (a, b) in r.iter().zip(&s) {
        assert_eq!(a.arrival_s.to_bits(), b.arrival_s.to_bits());
        assert_eq!(a.id, b.id);
    }
}

#[test]
fn same_seed_same_requests_other_seed_other_order() {
    let text = config(5, 5, "100", "uniform:10:1000", "uniform:1:100", 400);
    assert_eq!(requests(&text, 21), requests(&text, 21));
    let (a, b) = (requests(&text, 21), requests(&text, 22));
    let order = |r: &[Request]| r.iter().map(|q| q.segments()[1].id).collect::<Vec<_>>();
    assert_ne!(order(&a), order(&b));
    // Fixed lengths and all-at-once: only the order depends on the seed, and every seed uses
    // the same set of users.
    let fixed = config(3, 4, "10", "20", "5", 12).replace(
        "arrivals = \"poisson\"\nqps = 5.0",
        "arrivals = \"all-at-once\"",
    );
    let set = |r: &[Request]| r.iter().map(|q| q.segments()[1].id).collect::<HashSet<_>>();
    assert_eq!(set(&requests(&fixed, 1)), set(&requests(&fixed, 2)));
}

#[test]
fn bad_shared_prefix_tables_name_the_field() {
    let good = config(11, 4, "100", "466", "300", 2000);
    for (text, field, words) in [
        (
            good.replace("groups = 11\n", ""),
            "shared_prefix.groups",
            &["required", "system prompts"][..],
        ),
        (
            good.replace("users_per_group = 4\n", ""),
            "shared_prefix.users_per_group",
            &["required"][..],
        ),
        (
            good.replace("system_prompt_len = \"100\"\n", ""),
            "shared_prefix.system_prompt_len",
            &["required", "uniform:LO:HI"][..],
        ),
        (
            good.replace("question_len = \"466\"", "question_len = \"uniform:9:3\""),
            "shared_prefix.question_len",
            &["LO = 9 > HI = 3"][..],
        ),
        (
            good.replace("groups = 11", "groups = 0"),
            "shared_prefix.groups",
            &["at least 1"][..],
        ),
        (
            good.replace("users_per_group = 4", "users_per_group = 0"),
            "shared_prefix.users_per_group",
            &["at least 1"][..],
        ),
        (
            good.replace("groups = 11", "groups = 100000")
                .replace("users_per_group = 4", "users_per_group = 100000"),
            "shared_prefix.users_per_group",
            &["100000 × 100000", "at most 100000000 users"][..],
        ),
        (
            good.replace(
                "system_prompt_len = \"100\"",
                "system_prompt_len = \"4294967295\"",
            ),
            "shared_prefix.question_len",
            &["4294967295", "lower the largest"][..],
        ),
        (
            good.replace("requests = 2000\n", ""),
            "requests",
            &["required"][..],
        ),
        (
            good.replace(
                "requests = 2000",
                "requests = 2000\nprompt_lengths = \"512\"",
            ),
            "prompt_lengths",
            &[
                "not used with `[workload.shared_prefix]`",
                "system_prompt_len",
            ][..],
        ),
        (
            good.replace("arrivals = \"poisson\"\nqps = 5.0\n", "trace = \"t.csv\"\n"),
            "shared_prefix",
            &["not used when replaying a trace"][..],
        ),
        (
            good.clone()
                + "[conversation]\nconversations = 1\nturns = \"1\"\nfirst_message_len = \"1\"\nmessage_len = \"1\"\nthink_time_s = \"0\"\n",
            "conversation",
            &["not both"][..],
        ),
        (
            good.replace("output_lengths = \"300\"\n", ""),
            "output_lengths",
            &["required"][..],
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
    // Unknown keys in the subtable are refused.
    let e = toml::from_str::<kvplan_workloads::WorkloadConfig>(
        &good.replace("groups = 11", "num_groups = 11"),
    )
    .unwrap_err();
    assert!(e.to_string().contains("num_groups"), "{e}");
}

/// A `trace:FILE` question length whose largest value overflows a prompt is caught when the
/// workload is built (the file's values are unknown before).
#[test]
fn trace_lengths_are_bounded_when_read() {
    let path = crate::temp_file(
        "huge_prompts.csv",
        "arrived_at,num_prefill_tokens,num_decode_tokens\n0,4294967000,1\n",
    );
    let text = config(2, 2, "1000", &format!("trace:{}", path.display()), "4", 10);
    let spec = workload(&text).validate().unwrap();
    let e = generate(&spec, 0).unwrap_err().to_string();
    assert!(
        e.starts_with("shared_prefix.question_len: ") && e.contains("4294967000"),
        "{e}"
    );
}
