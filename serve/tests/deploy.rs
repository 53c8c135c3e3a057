//! The deployment planner (`kvplan_serve::deploy`): the cheapest deployment equals the one
//! worked by hand from the per-replica service rate, one replica fewer misses; pruning by
//! memory, roofline and GPU budget; the frontier is non-dominated; shards merge into the
//! unsharded plan exactly.

use std::collections::BTreeMap;

use kvplan_serve::capacity::{Slo, SteadyState, service_rate};
use kvplan_serve::deploy::{
    Layout, Outcome, Plan, PlanOptions, Space, frontier, plan, unit_rate_bound,
};
use kvplan_serve::router::RouterKind;
use kvplan_serve::scenario::RawServeScenario;
use kvplan_workloads::WorkloadConfig;

fn base(model: &str, qps: f64, requests: u64) -> RawServeScenario {
    RawServeScenario {
        model: Some(model.into()),
        workload: WorkloadConfig {
            arrivals: Some("poisson".into()),
            qps: Some(qps),
            prompt_lengths: Some("256".into()),
            output_lengths: Some("64".into()),
            requests: Some(requests),
            seed: Some(7),
            ..Default::default()
        },
        ..Default::default()
    }
}

fn space(hardware: &[&str], tps: &[u32], layouts: &[Layout]) -> Space {
    Space {
        hardware: hardware.iter().map(|h| h.to_string()).collect(),
        tensor_parallel: tps.to_vec(),
        layouts: layouts.to_vec(),
        routers: vec![RouterKind::from_name("round-robin").unwrap()],
        knobs: Vec::new(),
    }
}

fn opts(prices: &[(&str, f64)]) -> PlanOptions {
    PlanOptions {
        max_gpus: 64,
        steady: SteadyState::default(),
        prices: prices.iter().map(|(h, p)| (h.to_string(), *p)).collect(),
        shard: None,
    }
}

/// A Poisson load of 2.2 times one replica's service rate (its completion rate when always
/// backlogged, as `serve-capacity` measures it), under an objective loose enough that only
/// keeping up matters: by hand, ceil(2.2) = 3 replicas (each then at 73% of its service rate,
/// far enough below saturation for the queue to stay flat); 2 replicas are offered 110% of
/// theirs, so the queue grows and the plan must reject them.
#[test]
fn the_cheapest_deployment_is_the_one_worked_by_hand() {
    let mut one = base("llama-2-7b", 1.0, 4000);
    one.hardware = Some("a100-80g-sxm".into());
    let mu = service_rate(&one, &SteadyState::default()).unwrap();
    assert!(mu > 1.0, "service rate {mu}");
    let load = base("llama-2-7b", 2.2 * mu, 4000);
    let slo: Slo = "e2e_p99=600s".parse().unwrap();
    let p = plan(
        &load,
        &space(&["a100-80g-sxm"], &[1], &[Layout::Colocated]),
        &slo,
        &opts(&[("a100-80g-sxm", 1.5)]),
        &|_| {},
    )
    .unwrap();
    let (s, c) = p.cheapest().expect("some deployment meets it");
    assert_eq!(
        (s.shape.index, c.units, c.gpus),
        (0, 3, 3),
        "{:#?}",
        p.shapes
    );
    assert!((c.usd_per_hour - 4.5).abs() < 1e-12);
    let fewer = s
        .candidates
        .iter()
        .find(|k| k.units == 2)
        .expect("two replicas were simulated");
    assert_eq!(fewer.outcome, Outcome::Missed, "{}", fewer.why);
    assert!(!fewer.figures.as_ref().unwrap().stable, "{}", fewer.why);
    // The roofline bound is above the simulated service rate (it is a bound).
    assert!(s.unit_rate_bound > mu, "{} vs {mu}", s.unit_rate_bound);
}

/// Llama-3.1-70B does not fit one L40S (pruned with vLLM's reason, not simulated); a budget of
/// 2 GPUs prunes TP4 whole; a load above the roofline of a few replicas prunes those counts.
#[test]
fn shapes_that_cannot_work_are_pruned_without_simulating() {
    let load = base("llama-3.1-70b", 2.0, 400);
    let slo: Slo = "ttft_p99=30s".parse().unwrap();
    let mut o = opts(&[("l40s", 1.0)]);
    o.max_gpus = 2;
    let p = plan(
        &load,
        &space(&["l40s"], &[1, 4], &[Layout::Colocated]),
        &slo,
        &o,
        &|_| {},
    )
    .unwrap();
    let c = p.counts();
    assert_eq!(
        (c.pruned_memory, c.pruned_max_gpus, c.simulated),
        (1, 1, 0),
        "{c:?}"
    );
    let why = &p.shapes[0].candidates[0].why;
    assert!(why.contains("memory") || why.contains("KV"), "{why}");
    // The roofline: a rate far above one replica's bound prunes the counts below it.
    let sc = {
        let mut r = base("llama-2-7b", 1.0, 100);
        r.hardware = Some("a100-80g-sxm".into());
        r.resolve().unwrap()
    };
    let l = kvplan_serve::deploy::load_of(&{
        let mut r = base("llama-2-7b", 1.0, 100);
        r.hardware = Some("a100-80g-sxm".into());
        r
    })
    .unwrap();
    let bound = unit_rate_bound(&sc, Layout::Colocated, &l).requests_per_s;
    let heavy = base("llama-2-7b", 3.5 * bound, 2000);
    let p = plan(
        &heavy,
        &space(&["a100-80g-sxm"], &[1], &[Layout::Colocated]),
        &"ttft_p99=600s".parse().unwrap(),
        &opts(&[("a100-80g-sxm", 1.0)]),
        &|_| {},
    )
    .unwrap();
    let first = &p.shapes[0].candidates[0];
    assert_eq!(first.outcome, Outcome::PrunedRoofline, "{first:?}");
    assert_eq!(first.units, 3, "{}", first.why);
    assert!(p.shapes[0].candidates[1..].iter().all(|k| k.units >= 4));
}

/// Every frontier point met the objectives and none is dominated by another candidate that
/// met them; the cheapest is on it.
#[test]
fn the_frontier_is_the_non_dominated_met_candidates() {
    let load = base("llama-3.2-1b", 40.0, 1500);
    let slo: Slo = "ttft_p99=1s,tpot_p99=50ms".parse().unwrap();
    let p = plan(
        &load,
        &space(
            &["a100-80g-sxm", "l4"],
            &[1, 2],
            &[
                Layout::Colocated,
                Layout::Disaggregated {
                    prefill: 1,
                    decode: 1,
                },
            ],
        ),
        &slo,
        &opts(&[("a100-80g-sxm", 1.5), ("l4", 0.5)]),
        &|_| {},
    )
    .unwrap();
    let front = frontier(&p, &slo);
    assert!(!front.is_empty());
    let met: Vec<_> = p
        .simulated()
        .filter(|(_, c)| c.outcome == Outcome::Met)
        .map(|(_, c)| (c.usd_per_hour, c.figures.clone().unwrap()))
        .collect();
    for f in &front {
        assert!(f.binding.ratio <= 1.0, "{f:?}");
        assert!(!met.iter().any(|(usd, g)| *usd <= f.usd_per_hour
            && g.ttft_p99_s <= f.ttft_p99_s
            && g.tpot_p99_s <= f.tpot_p99_s
            && (*usd < f.usd_per_hour
                || g.ttft_p99_s < f.ttft_p99_s
                || g.tpot_p99_s < f.tpot_p99_s)));
    }
    let (_, c) = p.cheapest().unwrap();
    assert_eq!(front[0].usd_per_hour, c.usd_per_hour);
}

/// Shards run apart and merged give the unsharded plan, field for field and byte for byte as
/// JSON; a missing or doubled shard is refused.
#[test]
fn shards_merge_into_the_unsharded_plan() {
    let load = base("llama-3.2-1b", 20.0, 600);
    let slo: Slo = "ttft_p99=1s".parse().unwrap();
    let sp = space(&["a100-80g-sxm", "l4"], &[1, 2], &[Layout::Colocated]);
    let o = opts(&[("a100-80g-sxm", 1.5), ("l4", 0.5)]);
    let whole = plan(&load, &sp, &slo, &o, &|_| {}).unwrap();
    let mut parts = Vec::new();
    for i in 0..3 {
        let mut so = o.clone();
        so.shard = Some((i, 3));
        let part = plan(&load, &sp, &slo, &so, &|_| {}).unwrap();
        // Through JSON, as the command line passes them.
        let text = serde_json::to_string(&part).unwrap();
        parts.push((
            format!("s{i}"),
            serde_json::from_str::<Plan>(&text).unwrap(),
        ));
    }
    let merged = Plan::merge(parts.clone()).unwrap();
    assert_eq!(merged, whole);
    assert_eq!(
        serde_json::to_string(&merged).unwrap(),
        serde_json::to_string(&whole).unwrap()
    );
    let e = Plan::merge(parts[..2].to_vec()).unwrap_err().to_string();
    assert!(e.contains("missing"), "{e}");
    let mut twice = parts.clone();
    twice.push(parts[0].clone());
    let e = Plan::merge(twice).unwrap_err().to_string();
    assert!(e.contains("both"), "{e}");
}

/// An objective no candidate meets: no cheapest, and the nearest miss is the candidate whose
/// worst objective came closest.
#[test]
fn an_unmeetable_objective_names_the_nearest_miss() {
    let load = base("llama-3.2-1b", 5.0, 400);
    let slo: Slo = "tpot_p99=10us".parse().unwrap();
    let p = plan(
        &load,
        &space(&["a100-80g-sxm", "l4"], &[1], &[Layout::Colocated]),
        &slo,
        &opts(&[("a100-80g-sxm", 1.5), ("l4", 0.5)]),
        &|_| {},
    )
    .unwrap();
    assert!(p.cheapest().is_none());
    let (_, near) = p.nearest_miss().unwrap();
    let best = p
        .simulated()
        .map(|(_, c)| c.figures.as_ref().unwrap().worst())
        .fold(f64::INFINITY, f64::min);
    assert_eq!(near.figures.as_ref().unwrap().worst(), best);
    assert!(near.why.contains("tpot_p99"), "{}", near.why);
    // More units stopped helping: the shapes were given up at a latency floor, not run to the
    // GPU budget.
    assert!(p.counts().pruned_floor >= 1, "{:?}", p.counts());
}

/// Bad settings: an empty space, no price, a price of 0, a bad shard.
#[test]
fn bad_settings_name_their_field() {
    let load = base("llama-3.2-1b", 5.0, 100);
    let slo: Slo = "ttft_p99=1s".parse().unwrap();
    let run =
        |sp: &Space, o: &PlanOptions| plan(&load, sp, &slo, o, &|_| {}).unwrap_err().to_string();
    let o = opts(&[("l4", 0.5)]);
    let mut sp = space(&["l4"], &[1], &[Layout::Colocated]);
    sp.tensor_parallel.clear();
    assert!(run(&sp, &o).starts_with("plan.tensor_parallel_size: the search space is empty"));
    let sp = space(&["l4"], &[1], &[Layout::Colocated]);
    let e = run(&sp, &opts(&[("l4", 0.0)]));
    assert!(e.starts_with("gpu.price_usd_per_hour:"), "{e}");
    let mut bad = o.clone();
    bad.shard = Some((2, 2));
    assert!(run(&sp, &bad).starts_with("plan.shard:"));
    let mut none = o.clone();
    none.prices = BTreeMap::new();
    let sp = space(&["quadro-rtx-5000"], &[1], &[Layout::Colocated]);
    // A preset without a published price needs one given (the field, which the binary names
    // by its flag).
    let e = plan(&load, &sp, &slo, &none, &|_| {}).unwrap_err();
    assert!(
        e.to_string().contains("`plan.prices` quadro-rtx-5000=USD"),
        "{e}"
    );
}

/// The roofline bound is a bound: above the simulated service rate (the completion rate with
/// the requests arriving at once, as `serve-capacity` measures it) on dense and mixture-of-
/// experts models, 16-bit and fp8 KV, long and short prompts, colocated and disaggregated.
#[test]
fn the_roofline_bound_is_above_every_simulated_service_rate() {
    let fp8 = Some(kvplan_vocab::KvCacheDtype::Fp8);
    let cases = [
        (
            "llama-2-7b",
            "a100-80g-sxm",
            1,
            "256",
            "64",
            None,
            Layout::Colocated,
        ),
        (
            "llama-3.1-8b",
            "h100-sxm",
            1,
            "2048",
            "256",
            fp8,
            Layout::Colocated,
        ),
        (
            "mixtral-8x7b",
            "h100-sxm",
            2,
            "512",
            "128",
            None,
            Layout::Colocated,
        ),
        (
            "llama-3.2-1b",
            "l4",
            1,
            "64",
            "512",
            None,
            Layout::Colocated,
        ),
        (
            "llama-2-7b",
            "a100-80g-sxm",
            1,
            "1024",
            "128",
            None,
            Layout::Disaggregated {
                prefill: 1,
                decode: 1,
            },
        ),
    ];
    for (model, hw, tp, prompt, out, kv, layout) in cases {
        let mut raw = base(model, 1.0, 1000);
        raw.workload.prompt_lengths = Some(prompt.into());
        raw.workload.output_lengths = Some(out.into());
        raw.serve.max_model_len = Some(4096);
        if let Some(kv) = kv {
            raw.serve.kv_cache_dtype = Some(kv);
        }
        let shape = kvplan_serve::deploy::Shape {
            index: 0,
            hardware: hw.into(),
            tensor_parallel_size: tp,
            layout,
            router: RouterKind::from_name("round-robin").unwrap(),
            settings: Vec::new(),
        };
        let unit = shape.scenario(&raw, 1).unwrap();
        let load = kvplan_serve::deploy::load_of(&raw).unwrap();
        let bound = unit_rate_bound(&unit.clone().resolve().unwrap(), layout, &load);
        let steady = SteadyState {
            min_requests: 1000,
            ..SteadyState::default()
        };
        let mu = service_rate(&unit, &steady).unwrap();
        assert!(
            mu > 0.0 && bound.requests_per_s > mu,
            "{model} on {hw} TP{tp} {layout}: bound {} req/s ({}) below the simulated {mu}",
            bound.requests_per_s,
            bound.why
        );
    }
}

/// Requests every replica refuses (prompts past `max_model_len`) fail every count alike: the
/// shape is given up after its first stable miss, naming them, not grown to the GPU budget.
#[test]
fn requests_every_replica_refuses_stop_the_search() {
    let mut load = base("llama-3.2-1b", 5.0, 600);
    load.workload.prompt_lengths = Some("uniform:100:3000".into());
    load.serve.max_model_len = Some(2048);
    let p = plan(
        &load,
        &space(&["a100-80g-sxm"], &[1], &[Layout::Colocated]),
        &"ttft_p99=1s".parse().unwrap(),
        &opts(&[("a100-80g-sxm", 1.5)]),
        &|_| {},
    )
    .unwrap();
    let s = &p.shapes[0];
    assert!(p.cheapest().is_none());
    let last = s.candidates.last().unwrap();
    assert_eq!(last.outcome, Outcome::PrunedFloor, "{:?}", s.candidates);
    assert!(
        last.why.contains("rejected or cut at max_model_len"),
        "{}",
        last.why
    );
    assert!(s.candidates.len() <= 3, "{:?}", s.candidates);
    let (_, near) = p.nearest_miss().unwrap();
    assert!(near.why.contains("rejected"), "{}", near.why);
}
