//! Replicas behind a router, prefill/decode disaggregation, a CPU tier for the KV cache and its
//! hybrid reload (the cluster issue's "what it must show"), each against what it must equal or
//! beat.

use kvplan_serve::ServeReport;
use kvplan_serve::cluster::scenario::{RawCluster, RawInterconnect};
use kvplan_serve::cluster::{Binding, KvTransfer};
use kvplan_serve::router::RouterKind;
use kvplan_serve::scenario::{RawConfig, RawServeScenario, ScenarioError};
use kvplan_workloads::{SharedPrefixConfig, WorkloadConfig};

fn scenario(workload: WorkloadConfig, cluster: RawCluster) -> RawServeScenario {
    RawServeScenario {
        model: Some("llama-2-7b".into()),
        hardware: Some("h100-sxm".into()),
        workload,
        serve: RawConfig::default(),
        cluster,
    }
}

fn run(raw: RawServeScenario) -> ServeReport {
    let sc = raw.resolve().unwrap();
    sc.run(&sc.requests().unwrap()).unwrap()
}

fn router(name: &str) -> Option<RouterKind> {
    Some(name.parse().unwrap())
}

fn poisson(qps: f64, requests: u64, prompt: &str, output: &str) -> WorkloadConfig {
    WorkloadConfig {
        arrivals: Some("poisson".into()),
        qps: Some(qps),
        prompt_lengths: Some(prompt.into()),
        output_lengths: Some(output.into()),
        requests: Some(requests),
        seed: Some(7),
        ..Default::default()
    }
}

/// N identical replicas behind `random` at N times one replica's Poisson rate: each replica
/// sees a Poisson stream at the single rate (a random split of a Poisson process is Poisson), so
/// the cluster's latency distributions are one replica's. The band, 3%, is the issue's; with
/// 12,000 requests on one replica and 48,000 on four, the percentiles' sampling error is below
/// 1.5% (measured: the largest gap over the nine figures is about 1.3%).
#[test]
fn random_routing_is_exact() {
    let (n, rate) = (4u32, 5.0);
    let one = run(scenario(
        poisson(rate, 12_000, "uniform:128:1024", "uniform:32:256"),
        RawCluster::default(),
    ));
    let many = run(scenario(
        poisson(
            rate * f64::from(n),
            48_000,
            "uniform:128:1024",
            "uniform:32:256",
        ),
        RawCluster {
            data_parallel_size: Some(n),
            router: router("random"),
            ..Default::default()
        },
    ));
    let (a, b) = (&one.summary, &many.summary);
    for (what, x, y) in [
        ("TTFT p50", a.ttft_s.p50, b.ttft_s.p50),
        ("TTFT p99", a.ttft_s.p99, b.ttft_s.p99),
        ("TPOT p50", a.tpot_s.p50, b.tpot_s.p50),
        ("TPOT p99", a.tpot_s.p99, b.tpot_s.p99),
        ("E2E p50", a.e2e_s.p50, b.e2e_s.p50),
        ("E2E p99", a.e2e_s.p99, b.e2e_s.p99),
    ] {
        let gap = (y / x - 1.0).abs();
        assert!(
            gap < 0.03,
            "{what}: one replica {x}, {n} behind random {y} ({gap:.4})"
        );
    }
    // Every replica got its share: a uniform split of 48,000 requests over 4 gives each 12,000
    // +- 0.8% (one standard deviation); 5% is over six of them.
    let c = many.cluster.as_ref().unwrap();
    assert!(c.pools[0].imbalance < 1.05, "{:?}", c.pools[0].routed);
}

/// A shared-prefix load (32 system prompts of 2,000 tokens, 8 users each) on 4 replicas with
/// small KV caches: the routers that know where prefixes are cached hit more and start sooner
/// than round-robin, which scatters every group over every replica.
#[test]
fn prefix_routers_hit_more_and_answer_sooner_than_round_robin() {
    let workload = WorkloadConfig {
        arrivals: Some("poisson".into()),
        qps: Some(40.0),
        output_lengths: Some("64".into()),
        requests: Some(6000),
        seed: Some(3),
        shared_prefix: Some(SharedPrefixConfig {
            groups: Some(32),
            users_per_group: Some(8),
            system_prompt_len: Some("2000".into()),
            question_len: Some("200".into()),
        }),
        ..Default::default()
    };
    let with = |r: &str| {
        let mut raw = scenario(
            workload.clone(),
            RawCluster {
                data_parallel_size: Some(4),
                router: router(r),
                ..Default::default()
            },
        );
        raw.serve.num_gpu_blocks_override = Some(3000);
        run(raw).summary
    };
    let rr = with("round-robin");
    for r in ["prefix-aware", "kv-aware", "llm-d"] {
        let s = with(r);
        // Measured: round-robin 64% of prompt tokens hit; prefix-aware and llm-d 99%, kv-aware
        // 88% (it trades overlap against load). Ten points is well inside every gap.
        assert!(
            s.prefix_cache_hit_rate > rr.prefix_cache_hit_rate + 0.1,
            "{r}: hit rate {} vs round-robin {}",
            s.prefix_cache_hit_rate,
            rr.prefix_cache_hit_rate
        );
        assert!(
            s.ttft_s.p50 < rr.ttft_s.p50,
            "{r}: TTFT p50 {} vs round-robin {}",
            s.ttft_s.p50,
            rr.ttft_s.p50
        );
    }
}

/// Least outstanding requests against round robin. Bursty open-loop arrivals (gamma, CV 4) of
/// mixed lengths: balancing the requests in flight spreads the long decodes, so the end-to-end
/// tail is shorter (a replica's decode steps slow with its batch). Closed-loop sessions (the
/// routing benchmark's multi-turn clients, `data/validation/cluster/routing.csv`): with as many
/// sessions in flight as a few per replica, round robin stacks some replicas while others idle
/// and least-requests does not, so its TTFT is lower, as measured there (Qwen2.5-7B, 4 x A100:
/// p50 66-102 ms against 84-115 ms at 4-24 sessions). Not claimed: a lower TTFT tail under open
/// bursts; there round robin's even spacing of arrivals serves the prefills as well or better.
#[test]
fn least_requests_against_round_robin() {
    let bursty = WorkloadConfig {
        arrivals: Some("gamma:4".into()),
        qps: Some(12.0),
        prompt_lengths: Some("lognormal:600:1.0:6000".into()),
        output_lengths: Some("lognormal:150:1.0:1500".into()),
        requests: Some(8000),
        seed: Some(11),
        ..Default::default()
    };
    let sessions = WorkloadConfig {
        arrivals: Some("all-at-once".into()),
        output_lengths: Some("64".into()),
        seed: Some(2),
        conversation: Some(kvplan_workloads::ConversationConfig {
            conversations: Some(24),
            turns: Some("8".into()),
            first_message_len: Some("1500".into()),
            message_len: Some("100".into()),
            think_time_s: Some("0".into()),
            max_context: None,
        }),
        ..Default::default()
    };
    let with = |w: &WorkloadConfig, r: &str| {
        let mut raw = scenario(
            w.clone(),
            RawCluster {
                data_parallel_size: Some(4),
                router: router(r),
                ..Default::default()
            },
        );
        raw.model = Some("qwen2.5-7b".into());
        raw.hardware = Some("a100-80g-sxm".into());
        run(raw).summary
    };
    let (rr, lr) = (
        with(&bursty, "round-robin"),
        with(&bursty, "least-requests"),
    );
    assert!(
        lr.e2e_s.p99 < rr.e2e_s.p99,
        "bursts: least-requests E2E p99 {} vs round-robin {}",
        lr.e2e_s.p99,
        rr.e2e_s.p99
    );
    let (rr, lr) = (
        with(&sessions, "round-robin"),
        with(&sessions, "least-requests"),
    );
    // Measured: 55 ms against 143 ms; the benchmark's gap at 24 sessions is 11% (102 against
    // 115 ms), hence a 10% margin.
    assert!(
        lr.ttft_s.p50 < 0.9 * rr.ttft_s.p50,
        "sessions: least-requests TTFT p50 {} vs round-robin {}",
        lr.ttft_s.p50,
        rr.ttft_s.p50
    );
    assert!(lr.ttft_s.p99 <= rr.ttft_s.p99);
}

/// One request through a prefill and a decode replica: its KV transfer takes the bytes of its
/// prompt's blocks over the link's bandwidth plus the link's latency and per-transfer cost; the
/// layer-wise push leaves less of it after the prefill; the request's TTFT holds the transfer.
#[test]
fn one_transfer_is_bytes_over_bandwidth_plus_latency() {
    let prompt = 3000u32;
    let net = RawInterconnect {
        gbps: Some(25.0),
        latency_us: Some(7.0),
        per_transfer_us: Some(13.0),
        ..Default::default()
    };
    let with = |transfer| {
        run(scenario(
            poisson(1.0, 1, &prompt.to_string(), "16"),
            RawCluster {
                prefill_replicas: Some(1),
                decode_replicas: Some(1),
                kv_transfer: Some(transfer),
                interconnect: Some(net.clone()),
                ..Default::default()
            },
        ))
    };
    let pull = with(KvTransfer::Pull);
    let r = &pull.requests[0];
    let m = kvplan_vocab::ModelSpec::preset("llama-2-7b").unwrap();
    // Every prompt block (the partial last one too) is read.
    let bytes = f64::from(prompt.div_ceil(16) * 16) * m.kv_bytes_per_token() as f64;
    let expect = bytes / 25e9 + 7e-6 + 13e-6;
    assert!(
        (r.kv_transfer_s / expect - 1.0).abs() < 1e-9,
        "transfer {} s, bytes / bandwidth + latency = {expect} s",
        r.kv_transfer_s
    );
    assert!(r.ttft_s > r.kv_transfer_s);
    assert_eq!((r.replica, r.prefill_replica), (1, Some(0)));
    let c = pull.cluster.as_ref().unwrap();
    assert_eq!(c.transfer.unwrap().transfers, 1);
    // Layer-wise: the pushes overlap the prefill; what is left after it is at most one layer's
    // share of the chunk plus the fixed costs.
    let push = with(KvTransfer::Layerwise);
    let p = &push.requests[0];
    assert!(
        p.kv_transfer_s < r.kv_transfer_s,
        "{} vs {}",
        p.kv_transfer_s,
        r.kv_transfer_s
    );
    assert!(p.ttft_s < r.ttft_s);
    let tail = bytes / 25e9 / f64::from(m.num_layers) + 7e-6 + 13e-6;
    assert!(
        p.kv_transfer_s <= tail * (1.0 + 1e-9),
        "{} > {tail}",
        p.kv_transfer_s
    );
}

/// A prompt-heavy load on two GPUs: a prefill and a decode replica give a lower TPOT p99 than
/// two colocated replicas (decode steps no longer share the GPU with prefills), and the TTFT
/// holds the transfer.
#[test]
fn disaggregation_lowers_tpot_p99_on_prompt_heavy_loads() {
    let w = poisson(8.0, 3000, "3000", "100");
    let colocated = run(scenario(
        w.clone(),
        RawCluster {
            data_parallel_size: Some(2),
            router: router("round-robin"),
            ..Default::default()
        },
    ));
    let disagg = run(scenario(
        w,
        RawCluster {
            prefill_replicas: Some(1),
            decode_replicas: Some(1),
            ..Default::default()
        },
    ));
    let (c, d) = (&colocated.summary, &disagg.summary);
    assert!(
        d.tpot_s.p99 < c.tpot_s.p99,
        "TPOT p99 {} vs {}",
        d.tpot_s.p99,
        c.tpot_s.p99
    );
    for r in disagg.requests.iter().take(100) {
        assert!(r.ttft_s > r.kv_transfer_s && r.kv_transfer_s > 0.0);
    }
}

/// With a link too slow for the load, the report says the link binds; with the default
/// network it does not.
#[test]
fn a_slow_link_binds() {
    let with = |gbps: Option<f64>| {
        run(scenario(
            poisson(4.0, 400, "3000", "100"),
            RawCluster {
                prefill_replicas: Some(1),
                decode_replicas: Some(1),
                interconnect: gbps.map(|g| RawInterconnect {
                    gbps: Some(g),
                    ..Default::default()
                }),
                ..Default::default()
            },
        ))
    };
    let slow = with(Some(1.5));
    let c = slow.cluster.as_ref().unwrap();
    assert_eq!(c.binding, Some(Binding::Network), "{c:?}");
    assert!(c.transfer.unwrap().wait_s > 0.0);
    let fast = with(None);
    assert_ne!(
        fast.cluster.as_ref().unwrap().binding,
        Some(Binding::Network)
    );
}

/// Bad cluster settings are errors naming the field.
#[test]
fn bad_cluster_settings_name_the_field() {
    let err = |c: RawCluster, serve: RawConfig| -> String {
        let mut raw = scenario(poisson(1.0, 4, "64", "4"), c);
        raw.serve = serve;
        match raw.resolve() {
            Ok(_) => panic!("resolved"),
            Err(e) => e.to_string(),
        }
    };
    let e = err(
        RawCluster {
            data_parallel_size: Some(2),
            router: router("prefix-aware"),
            ..Default::default()
        },
        RawConfig {
            enable_prefix_caching: Some(false),
            ..Default::default()
        },
    );
    assert!(
        e.starts_with("cluster.router:") && e.contains("prefix cach"),
        "{e}"
    );
    for (p, d, field) in [
        (Some(0), Some(1), "cluster.prefill_replicas"),
        (Some(1), Some(0), "cluster.decode_replicas"),
        (Some(1), None, "cluster.decode_replicas"),
    ] {
        let e = err(
            RawCluster {
                prefill_replicas: p,
                decode_replicas: d,
                ..Default::default()
            },
            RawConfig::default(),
        );
        assert!(e.starts_with(&format!("{field}:")), "{e}");
    }
    let e = err(
        RawCluster {
            prefill_replicas: Some(1),
            decode_replicas: Some(1),
            interconnect: Some(RawInterconnect {
                gbps: Some(0.0),
                ..Default::default()
            }),
            ..Default::default()
        },
        RawConfig::default(),
    );
    assert!(e.starts_with("cluster.interconnect.gbps:"), "{e}");
    let e = err(
        RawCluster::default(),
        RawConfig {
            kv_offloading_size_gib: Some(1e6),
            ..Default::default()
        },
    );
    assert!(
        e.starts_with("kv_offloading_size_gib:") && e.contains("RAM"),
        "{e}"
    );
    let e = err(
        RawCluster {
            data_parallel_size: Some(0),
            ..Default::default()
        },
        RawConfig::default(),
    );
    assert!(e.starts_with("cluster.data_parallel_size:"), "{e}");
    // A replica group's own settings are named by the table they are in.
    let mut raw = scenario(
        poisson(1.0, 4, "64", "4"),
        RawCluster {
            prefill_replicas: Some(1),
            decode_replicas: Some(1),
            prefill: Some(kvplan_serve::cluster::scenario::RawPool {
                hardware: None,
                serve: RawConfig {
                    block_size: Some(0),
                    ..Default::default()
                },
            }),
            ..Default::default()
        },
    );
    raw.serve = RawConfig::default();
    match raw.resolve() {
        Err(e @ ScenarioError::Replica { .. }) => {
            let e = e.to_string();
            assert!(e.starts_with("cluster.prefill.serve.block_size:"), "{e}");
        }
        other => panic!("{other:?}"),
    }
}

/// The same scenario and seed give the same cluster run, request for request.
#[test]
fn cluster_runs_are_deterministic() {
    let raw = || {
        scenario(
            poisson(30.0, 1500, "uniform:64:2048", "uniform:8:256"),
            RawCluster {
                data_parallel_size: Some(3),
                router: router("llm-d"),
                router_staleness_s: Some(0.2),
                ..Default::default()
            },
        )
    };
    let csv = |r: &ServeReport| {
        let mut v = Vec::new();
        r.write_requests_csv(&mut v).unwrap();
        r.write_summary_json(&mut v).unwrap();
        r.write_timeseries_csv(&mut v).unwrap();
        v
    };
    let (a, b) = (run(raw()), run(raw()));
    assert_eq!(csv(&a), csv(&b));
    assert!(a.requests.iter().any(|r| r.replica == 2));
}

/// Dynamo's router learns the replicas' cached blocks from their KV events. Arriving at once,
/// the events say what the replicas' prefix caches hold, so the router reads those; through an
/// index of the same events a nanosecond late it routes every request the same way.
#[test]
fn kv_events_read_at_once_and_through_an_index_agree() {
    let with = |staleness: f64| {
        let mut raw = scenario(
            WorkloadConfig {
                arrivals: Some("poisson".into()),
                qps: Some(30.0),
                output_lengths: Some("32".into()),
                requests: Some(2000),
                seed: Some(9),
                shared_prefix: Some(SharedPrefixConfig {
                    groups: Some(16),
                    users_per_group: Some(4),
                    system_prompt_len: Some("1500".into()),
                    question_len: Some("100".into()),
                }),
                ..Default::default()
            },
            RawCluster {
                data_parallel_size: Some(3),
                router: router("kv-aware"),
                router_staleness_s: Some(staleness),
                ..Default::default()
            },
        );
        raw.serve.num_gpu_blocks_override = Some(2500);
        let out = run(raw);
        let mut v = Vec::new();
        out.write_requests_csv(&mut v).unwrap();
        (v, out.summary.prefix_cache_hit_rate)
    };
    let (live, hit) = with(0.0);
    let (index, _) = with(1e-9);
    // 16 system prompts of 1,500 tokens over 3 replicas: most prompt tokens hit once each
    // prompt is cached where its users go; half is a floor any prefix-following router clears.
    assert!(hit > 0.5, "the router finds the prefixes: {hit}");
    assert!(live == index, "the two views routed differently");
    // Seconds late, it routes differently (it does use the events).
    assert!(with(2.0).0 != live);
}

/// A request its decode replica refuses (a prompt past the decode pool's `max_model_len`) frees
/// the blocks its prefill replica held for the read that will not come: with room for two such
/// prompts on the prefill replica, twenty of them all end, refused.
#[test]
fn a_refused_hand_over_frees_the_prefill_blocks() {
    let mut raw = scenario(
        poisson(2.0, 20, "3000", "16"),
        RawCluster {
            prefill_replicas: Some(1),
            decode_replicas: Some(1),
            prefill: Some(kvplan_serve::cluster::scenario::RawPool {
                hardware: None,
                serve: RawConfig {
                    num_gpu_blocks_override: Some(400),
                    ..Default::default()
                },
            }),
            decode: Some(kvplan_serve::cluster::scenario::RawPool {
                hardware: None,
                serve: RawConfig {
                    max_model_len: Some(2048),
                    ..Default::default()
                },
            }),
            ..Default::default()
        },
    );
    raw.serve.max_model_len = Some(4096);
    let out = run(raw);
    assert_eq!(out.summary.rejected, 20);
    assert_eq!(
        out.summary.rejected_by_reason.get("prompt-too-long"),
        Some(&20)
    );
}
