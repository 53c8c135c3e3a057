//! `[serve] vllm_version`: each release changes what it changed in vLLM and nothing else. Every
//! test resolves the same settings under two neighbouring releases and compares the whole
//! [`Resolved`]: only the fields the release changed (and what follows from them: a larger
//! token budget takes more activation memory, so fewer KV blocks) may differ.

use std::path::PathBuf;

use kvplan_serve::config::{CudagraphMode, VllmVersion};
use kvplan_serve::runs::StageRun;
use kvplan_serve::{Config, Error, Resolved, SchedulerKind, simulate};
use kvplan_vocab::{HardwareProfile, ModelSpec};
use kvplan_workloads::Request;

fn on(version: VllmVersion, c: &Config) -> Config {
    Config {
        vllm_version: Some(version),
        ..c.clone()
    }
}

fn resolve(hw: &str, c: &Config) -> Result<Resolved, Error> {
    let m = ModelSpec::preset("llama-2-7b").unwrap();
    c.validate(&m, &HardwareProfile::preset(hw).unwrap())
}

/// `c` under `old` and `new` on `hw`, both resolved.
fn pair(hw: &str, c: &Config, old: VllmVersion, new: VllmVersion) -> (Resolved, Resolved) {
    (
        resolve(hw, &on(old, c)).unwrap(),
        resolve(hw, &on(new, c)).unwrap(),
    )
}

/// `a` and `b` are equal but for the release followed and the named fields, each of which
/// differs.
macro_rules! only_differ {
    ($a:expr, $b:expr, [$($field:ident),*]) => {{
        let (a, b): (&Resolved, &Resolved) = (&$a, &$b);
        let mut x = a.clone();
        x.config.vllm_version = b.config.vllm_version;
        x.vllm_version = b.vllm_version;
        $(
            assert_ne!(a.$field, b.$field, concat!(stringify!($field), " should differ"));
            x.$field = b.$field.clone();
        )*
        assert_eq!(x, *b);
    }};
}

/// The field an error names.
fn field(e: Error) -> &'static str {
    match e {
        Error::InvalidConfig { field, .. } => field,
        other => panic!("{other}"),
    }
}

/// Unset, `vllm-v1` follows the newest release: the same as naming it.
#[test]
fn the_default_is_the_newest_release() {
    let d = resolve("h100-sxm", &Config::default()).unwrap();
    assert_eq!(d.vllm_version, VllmVersion::NEWEST);
    assert_eq!(VllmVersion::NEWEST.as_str(), "0.15.1");
    let named = resolve("h100-sxm", &on(VllmVersion::NEWEST, &Config::default())).unwrap();
    only_differ!(d, named, []);
    // The 0.4 schedulers follow 0.4.2, named or not.
    let v0 = resolve("h100-sxm", &Config::vllm_v0()).unwrap();
    assert_eq!(v0.vllm_version, VllmVersion::V0_4_2);
    let named = resolve("h100-sxm", &on(VllmVersion::V0_4_2, &Config::vllm_v0())).unwrap();
    only_differ!(v0, named, []);
}

/// Batch defaults: vLLM 0.8.5 gives every GPU of 70 GiB or more 8192 tokens and 1024
/// sequences, the A100 80GB too; from 0.9.0 A100s keep 2048 and 256 (`"a100" not in
/// device_name`, `_set_default_args_v1`). On an H100 and a 40 GB A100 nothing changes.
#[test]
fn batch_defaults_spare_the_a100_from_0_9() {
    let c = Config::default();
    let (old, new) = pair("a100-80g-sxm", &c, VllmVersion::V0_8_5, VllmVersion::V0_9_2);
    assert_eq!((old.max_num_batched_tokens, old.max_num_seqs), (8192, 1024));
    assert_eq!((new.max_num_batched_tokens, new.max_num_seqs), (2048, 256));
    // A pass of 8192 tokens takes more activation memory than one of 2048: fewer KV blocks.
    only_differ!(
        old,
        new,
        [
            max_num_batched_tokens,
            max_num_seqs,
            activation_bytes,
            gpu_blocks,
            usable_blocks
        ]
    );
    for hw in ["h100-sxm", "a100-40g-pcie4"] {
        let (old, new) = pair(hw, &c, VllmVersion::V0_8_5, VllmVersion::V0_9_2);
        only_differ!(old, new, []);
    }
    // Set by hand, the release's default does not apply.
    let c = Config {
        max_num_batched_tokens: Some(4096),
        max_num_seqs: Some(512),
        ..Config::default()
    };
    let (old, new) = pair("a100-80g-sxm", &c, VllmVersion::V0_8_5, VllmVersion::V0_9_2);
    only_differ!(old, new, []);
}

/// Capture sizes: up to vLLM 0.9 the list runs to 512 whatever `max_num_seqs`
/// (`cuda_graph_sizes = [512]`); from 0.10 to `min(2 × max_num_seqs, 512)`.
#[test]
fn capture_sizes_follow_max_num_seqs_from_0_10() {
    let c = Config {
        max_num_seqs: Some(64),
        ..Config::default()
    };
    let (old, new) = pair("h100-sxm", &c, VllmVersion::V0_9_2, VllmVersion::V0_10_2);
    assert_eq!(old.cudagraph_sizes.last(), Some(&512));
    assert_eq!(new.cudagraph_sizes.last(), Some(&128));
    only_differ!(old, new, [cudagraph_sizes]);
    // At the defaults (1024 sequences) both end at 512, every 8 tokens.
    let (old, new) = pair(
        "h100-sxm",
        &Config::default(),
        VllmVersion::V0_9_2,
        VllmVersion::V0_10_2,
    );
    assert_eq!(new.cudagraph_sizes.len(), 3 + 64);
    only_differ!(old, new, []);
    // A largest size given by hand is the same rule in both.
    let c = Config {
        max_cudagraph_capture_size: Some(96),
        ..c
    };
    let (old, new) = pair("h100-sxm", &c, VllmVersion::V0_9_2, VllmVersion::V0_10_2);
    only_differ!(old, new, []);
}

/// Asynchronous scheduling: none before vLLM 0.10.0 (asking for it is refused), off by default
/// from 0.10.0 to 0.13, on by default from 0.14.0.
#[test]
fn async_scheduling_comes_in_0_10_and_is_on_from_0_14() {
    let c = Config::default();
    let (old, new) = pair("h100-sxm", &c, VllmVersion::V0_13_0, VllmVersion::V0_15_1);
    assert!(!old.async_scheduling && new.async_scheduling);
    only_differ!(old, new, [async_scheduling]);
    for asked in [true, false] {
        let c = Config {
            async_scheduling: Some(asked),
            ..Config::default()
        };
        let (old, new) = pair("h100-sxm", &c, VllmVersion::V0_13_0, VllmVersion::V0_15_1);
        assert_eq!(new.async_scheduling, asked);
        only_differ!(old, new, []);
    }
    let asked = Config {
        async_scheduling: Some(true),
        ..Config::default()
    };
    assert!(
        resolve("h100-sxm", &on(VllmVersion::V0_10_2, &asked))
            .unwrap()
            .async_scheduling
    );
    for v in [VllmVersion::V0_8_5, VllmVersion::V0_9_2] {
        let e = resolve("h100-sxm", &on(v, &asked)).unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("came in vLLM 0.10.0: 0.10.2, 0.11.0, 0.13.0 or 0.15.1"),
            "{text}"
        );
        assert_eq!(field(e), "async_scheduling");
        let off = Config {
            async_scheduling: Some(false),
            ..Config::default()
        };
        assert!(!resolve("h100-sxm", &on(v, &off)).unwrap().async_scheduling);
    }
}

/// CUDA-graph mode: piecewise graphs only up to vLLM 0.10; `FULL_AND_PIECEWISE` from 0.11.0.
/// Decode steps then run as full graphs: where the host shows, the same requests decode
/// faster.
#[test]
fn full_cuda_graphs_from_0_11() {
    let c = Config::default();
    let (old, new) = pair("h100-sxm", &c, VllmVersion::V0_10_2, VllmVersion::V0_11_0);
    assert_eq!(old.cudagraph_mode, CudagraphMode::Piecewise);
    assert_eq!(new.cudagraph_mode, CudagraphMode::FullAndPiecewise);
    only_differ!(old, new, [cudagraph_mode]);
    let eager = Config {
        enforce_eager: true,
        ..Config::default()
    };
    let (old, new) = pair(
        "h100-sxm",
        &eager,
        VllmVersion::V0_10_2,
        VllmVersion::V0_11_0,
    );
    assert_eq!(new.cudagraph_mode, CudagraphMode::None);
    only_differ!(old, new, []);

    // A small model's decode steps are short enough for the host to show: a piecewise step
    // launches attention eagerly between the graphs, layer by layer.
    let m = ModelSpec::preset("opt-125m").unwrap();
    let hw = HardwareProfile::preset("h100-sxm").unwrap();
    let reqs: Vec<Request> = (0..8).map(|i| Request::new(i, 0.0, 128, 64)).collect();
    let tpot = |v| {
        simulate(&m, &hw, &on(v, &c), &reqs)
            .unwrap()
            .summary
            .tpot_s
            .mean
    };
    let (piecewise, full) = (tpot(VllmVersion::V0_10_2), tpot(VllmVersion::V0_11_0));
    assert!(full < piecewise, "{full} vs {piecewise}");
}

/// Capture sizes every 16 tokens from 256 (vLLM 0.11.1 on; 0.13.0 here) where 0.11.0 captured
/// every 8.
#[test]
fn capture_sizes_every_16_from_256_after_0_11_0() {
    let c = Config::default();
    let (old, new) = pair("h100-sxm", &c, VllmVersion::V0_11_0, VllmVersion::V0_13_0);
    assert!(old.cudagraph_sizes.contains(&264));
    assert!(!new.cudagraph_sizes.contains(&264));
    assert_eq!(
        (old.cudagraph_sizes.len(), new.cudagraph_sizes.len()),
        (67, 51)
    );
    only_differ!(old, new, [cudagraph_sizes]);
}

/// Chunked prefill: on by default in every V1 release; up to 0.11.0 the engine turns it on
/// whatever is asked (refused here), from 0.11.2 (0.13.0 here) it can be turned off.
#[test]
fn chunked_prefill_can_be_turned_off_after_0_11_0() {
    let off = Config {
        enable_chunked_prefill: Some(false),
        ..Config::default()
    };
    let r = resolve("h100-sxm", &on(VllmVersion::V0_13_0, &off)).unwrap();
    assert!(!r.chunked_prefill);
    for v in [
        VllmVersion::V0_8_5,
        VllmVersion::V0_9_2,
        VllmVersion::V0_10_2,
        VllmVersion::V0_11_0,
    ] {
        let e = resolve("h100-sxm", &on(v, &off)).unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains(&format!(
                "with vLLM {v}: its V1 engine always chunks prefills"
            )) && text.contains("0.13.0 or 0.15.1 let it be turned off"),
            "{text}"
        );
        assert_eq!(field(e), "enable_chunked_prefill");
        let asked_on = Config {
            enable_chunked_prefill: Some(true),
            ..Config::default()
        };
        assert!(
            resolve("h100-sxm", &on(v, &asked_on))
                .unwrap()
                .chunked_prefill
        );
    }
}

/// Prefix caching is on by default in every V1 release modelled, and can be turned off in each:
/// no release changes it.
#[test]
fn prefix_caching_is_on_in_every_v1_release() {
    let off = Config {
        enable_prefix_caching: Some(false),
        ..Config::default()
    };
    for r in kvplan_serve::sched::versions::RELEASES {
        if r.version == VllmVersion::V0_4_2 {
            continue;
        }
        assert!(
            resolve("h100-sxm", &on(r.version, &Config::default()))
                .unwrap()
                .prefix_caching
        );
        assert!(
            !resolve("h100-sxm", &on(r.version, &off))
                .unwrap()
                .prefix_caching
        );
    }
}

/// The CPU tier: vLLM's own OffloadingConnector (`native`) from 0.11.0, ARC eviction from
/// 0.11.1; LMCache's connector in every V1 release modelled.
#[test]
fn the_cpu_tier_needs_a_release_that_has_it() {
    let tier = Config {
        kv_offloading_size_gib: Some(8.0),
        ..Config::default()
    };
    for v in [VllmVersion::V0_8_5, VllmVersion::V0_10_2] {
        let e = resolve("h100-sxm", &on(v, &tier)).unwrap_err();
        assert!(
            e.to_string().contains("OffloadingConnector came in 0.11.0"),
            "{e}"
        );
        assert_eq!(field(e), "kv_offloading_backend");
        let lmcache = Config {
            kv_offloading_backend: "lmcache".parse().unwrap(),
            ..tier.clone()
        };
        assert!(resolve("h100-sxm", &on(v, &lmcache)).unwrap().offload_bytes > 0);
    }
    let (old, new) = pair(
        "h100-sxm",
        &tier,
        VllmVersion::V0_11_0,
        VllmVersion::V0_13_0,
    );
    assert!(old.offload_bytes > 0);
    only_differ!(old, new, [cudagraph_sizes]);
    let arc = Config {
        kv_offloading_eviction: "arc".parse().unwrap(),
        ..tier
    };
    let e = resolve("h100-sxm", &on(VllmVersion::V0_11_0, &arc)).unwrap_err();
    assert!(e.to_string().contains("ARC eviction came in 0.11.1"), "{e}");
    assert_eq!(field(e), "kv_offloading_eviction");
    assert!(resolve("h100-sxm", &on(VllmVersion::V0_13_0, &arc)).is_ok());
}

/// A V1 release with a 0.4 scheduler, or 0.4.2 with `vllm-v1`, is refused naming the field.
#[test]
fn a_release_of_the_other_engine_is_refused() {
    let e = resolve("h100-sxm", &on(VllmVersion::V0_15_1, &Config::vllm_v0())).unwrap_err();
    assert!(e.to_string().contains("use scheduler vllm-v1"), "{e}");
    assert_eq!(field(e), "vllm_version");
    for s in [SchedulerKind::Mixed, SchedulerKind::Chunked] {
        let c = Config {
            scheduler: s,
            vllm_version: Some(VllmVersion::V0_10_2),
            ..Config::default()
        };
        assert_eq!(field(resolve("h100-sxm", &c).unwrap_err()), "vllm_version");
    }
    let e = resolve("h100-sxm", &on(VllmVersion::V0_4_2, &Config::default())).unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("0.8.5, 0.9.2, 0.10.2, 0.11.0, 0.13.0 or 0.15.1")
            && text.contains("0.4.2 is the 0.4 engine"),
        "{text}"
    );
    assert_eq!(field(e), "vllm_version");
}

/// A `[serve]` table names the release as text, with or without the `v`, or by its series.
#[test]
fn a_scenario_names_the_release() {
    for (text, want) in [
        ("0.10.2", VllmVersion::V0_10_2),
        ("v0.13.0", VllmVersion::V0_13_0),
        ("0.15", VllmVersion::V0_15_1),
    ] {
        let raw: kvplan_serve::scenario::RawConfig =
            toml::from_str(&format!("vllm_version = \"{text}\"")).unwrap();
        assert_eq!(raw.vllm_version, Some(want));
    }
    let e = toml::from_str::<kvplan_serve::scenario::RawConfig>("vllm_version = \"0.12.0\"")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("`0.12.0` is not a vLLM release kvplan models"),
        "{e}"
    );
}

fn stage_table() -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../data/validation/real_vllm/vllm_h100_llama2-7b_mixtral-8x7b.csv");
    std::fs::read_to_string(path).unwrap()
}

/// The stage table's first row with its `vllm_version` cell replaced.
fn first_row_as(version: &str) -> StageRun {
    let text = stage_table();
    let mut lines = text.lines();
    let header = lines.next().unwrap();
    let row = lines.next().unwrap();
    let i = header.split(',').position(|c| c == "vllm_version").unwrap();
    let mut cells: Vec<&str> = row.split(',').collect();
    cells[i] = version;
    let t = format!("{header}\n{}\n", cells.join(","));
    StageRun::parse(&t, "t.csv").unwrap().remove(0)
}

/// A stage is replayed under its own row's release: the table's v0.15.1 rows as the default,
/// a v0.13.0 row without asynchronous scheduling (its only change here), a v0.10.2 row refused
/// for the CPU tier it could not have had.
#[test]
fn a_stage_replays_with_its_own_release() {
    let table = StageRun::parse(&stage_table(), "t.csv").unwrap();
    assert!(
        table
            .iter()
            .all(|s| s.vllm_version == Some(VllmVersion::V0_15_1))
    );
    let resolved = |st: &StageRun| st.scenario(None, None).unwrap().resolve();
    let newest = resolved(&table[0]).unwrap();
    assert_eq!(newest.resolved.vllm_version, VllmVersion::V0_15_1);
    assert!(newest.resolved.async_scheduling);

    let st = first_row_as("v0.13.0");
    assert_eq!(st.vllm_version, Some(VllmVersion::V0_13_0));
    let old = resolved(&st).unwrap();
    assert_eq!(old.config.vllm_version, Some(VllmVersion::V0_13_0));
    only_differ!(newest.resolved, old.resolved, [async_scheduling]);

    // Not recorded: the newest.
    let st = first_row_as("");
    assert_eq!(st.vllm_version, None);
    only_differ!(newest.resolved, resolved(&st).unwrap().resolved, []);

    let e = resolved(&first_row_as("v0.10.2")).unwrap_err().to_string();
    assert!(e.contains("kv_offloading_backend"), "{e}");
}
