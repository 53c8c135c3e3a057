//! Every embedded preset, model and hardware, as a table: it loads, survives a round trip, has
//! positive sizes, and (models) lands near its cited parameter count; Hugging Face ids resolve
//! and misspelt names suggest the right preset.

use kvplan_vocab::Error;
use kvplan_vocab::hardware::{self, HardwareProfile, ProfileFile};
use kvplan_vocab::model::{self, ModelSpec, PUBLISHED_PARAMS};

#[test]
fn every_model_preset_loads_round_trips_and_matches_its_count() {
    for (name, text) in model::PRESETS {
        let m = ModelSpec::preset(name).unwrap();
        assert_eq!(&m.name, name);
        // The same config text read back as a user's file gives the same shapes.
        let again = ModelSpec::from_hf_config_str(text, name, "again").unwrap();
        assert_eq!(again, m, "{name}");
        for (what, v) in [
            ("layers", m.num_layers),
            ("hidden", m.hidden),
            ("heads", m.num_heads),
            ("kv heads", m.num_kv_heads),
            ("head_dim", m.head_dim),
            ("ffn", m.ffn_dim),
            ("vocab", m.vocab),
            ("max_position", m.max_position),
        ] {
            assert!(v > 0, "{name}: {what} is 0");
        }
        assert!(m.kv_bytes_per_token() > 0 && m.weight_bytes() > 0, "{name}");
        let published = PUBLISHED_PARAMS
            .iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("{name}: no cited parameter count"))
            .1;
        let rel = (m.params() as f64 - published).abs() / published;
        assert!(rel <= 0.02, "{name}: {} vs cited {published:e}", m.params());
    }
}

#[test]
fn every_hardware_preset_loads_and_round_trips_through_its_toml() {
    for (name, text) in hardware::PRESETS {
        let p = HardwareProfile::preset(name).unwrap();
        assert_eq!(&p.name, name);
        let file: ProfileFile = toml::from_str(text).unwrap();
        let back = HardwareProfile::from_toml_str(&file.to_toml(), "written").unwrap();
        assert_eq!(back, p, "{name}");
        let g = &p.gpu;
        assert!(
            g.memory_bytes > g.reserved_bytes && g.reserved_bytes > 0,
            "{name}"
        );
        assert!(g.mem_bandwidth > 0.0 && g.kernel_overhead_s > 0.0, "{name}");
        let f = g.peak_flops;
        assert!(f.fp16 > 0.0 && f.bf16 > 0.0 && f.fp32 > 0.0, "{name}");
        assert!(p.link.h2d_pinned > 0.0 && p.link.d2h_pinned > 0.0, "{name}");
        assert!(p.peer.bandwidth > 0.0 && p.host.ram_bytes > 0, "{name}");
        assert!(!p.description.is_empty(), "{name}");
    }
}

#[test]
fn presets_lists_every_preset_in_name_order() {
    let models: Vec<String> = ModelSpec::presets()
        .unwrap()
        .into_iter()
        .map(|m| m.name)
        .collect();
    assert_eq!(models, ModelSpec::preset_names());
    let names: Vec<String> = HardwareProfile::presets()
        .unwrap()
        .into_iter()
        .map(|p| p.name)
        .collect();
    assert_eq!(names, HardwareProfile::preset_names());
}

#[test]
fn reported_memory_of_the_new_cards() {
    // Usable memory as the device reports it (nvidia-smi's MiB total), in GiB to 0.1.
    for (name, mib) in [
        ("t4", 15_360.0),
        ("l4", 23_034.0),
        ("a10g", 23_028.0),
        ("l40s", 46_068.0),
        ("h100-nvl", 95_830.0),
        ("b200", 183_359.0),
        ("rtx-pro-6000", 97_887.0),
        ("rtx-5090", 32_607.0),
    ] {
        let p = HardwareProfile::preset(name).unwrap();
        let gib = p.gpu.memory_bytes as f64 / (1u64 << 30) as f64;
        assert!(
            (gib - mib / 1024.0).abs() < 0.06,
            "{name}: {gib} GiB vs {mib} MiB"
        );
    }
    let amd = HardwareProfile::preset("mi300x").unwrap();
    assert!(amd.description.contains("simulation only"));
}

#[test]
fn misspelt_hardware_suggests_the_preset() {
    for (asked, want) in [
        ("h100nvl", "h100-nvl"),
        ("rtx5090", "rtx-5090"),
        ("l40", "l40s"),
        ("a200", "a100-80g-sxm"),
    ] {
        let e = HardwareProfile::resolve(asked).unwrap_err();
        let Error::UnknownHardware { close, .. } = &e else {
            panic!("{asked}: {e}")
        };
        if asked == "a200" {
            // Nothing is that close to a200 but h200; the message still lists every profile.
            assert!(close.iter().any(|c| c == "h200"), "{asked}: {close:?}");
            assert!(e.to_string().contains(want), "{e}");
            continue;
        }
        assert!(close.iter().any(|c| c == want), "{asked}: {close:?}");
        let msg = e.to_string();
        let (head, list) = msg.split_once("; known profiles:").unwrap();
        assert!(
            head.contains("did you mean") && head.contains(want),
            "{msg}"
        );
        assert!(list.contains("t4"), "{msg}");
    }
}

#[test]
fn hugging_face_ids_of_the_new_presets_resolve() {
    for (id, preset) in [
        ("meta-llama/Llama-3.1-70B-Instruct", "llama-3.1-70b"),
        ("meta-llama/Meta-Llama-3.1-405B", "llama-3.1-405b"),
        ("meta-llama/llama-3.2-3b", "llama-3.2-3b"),
        ("QWEN/QWEN2.5-32B", "qwen2.5-32b"),
        ("Qwen/Qwen3-14B", "qwen3-14b"),
        ("mistralai/mistral-nemo-base-2407", "mistral-nemo-12b"),
        ("google/gemma-2-27b", "gemma-2-27b"),
    ] {
        assert_eq!(ModelSpec::resolve(id).unwrap().name, preset, "{id}");
    }
}
