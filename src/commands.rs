//! The subcommands: load, call the planner and simulator, render. No modelling logic here.

use std::fmt::Write as _;
use std::path::Path;

use kvplan_planner::plan::{Plan, Strategy};
use kvplan_planner::report::{RunReport, recompute_fraction, saved_fraction, ttft_speedups};
use kvplan_planner::run::{COMPARED, SimulatedRun, compare, simulate_scenario};
use kvplan_planner::scenario::Scenario;
use kvplan_vocab::schedule::Category;
use kvplan_vocab::timeline::{Run, write_chrome_trace, write_csv};
use kvplan_vocab::{HardwareProfile, ModelSpec};
use serde::Serialize;
use serde_json::json;

use crate::args::{CapacityArgs, Format, HardwareArgs, ModelsArgs, PlanArgs, SimulateArgs};
use crate::error::CliError;
use crate::output::write_output;
use crate::render::{Table, gib, pct, secs};

/// Text for stdout.
pub type Output = String;

pub(crate) fn json_line<T: Serialize>(v: &T) -> Result<Output, CliError> {
    let mut s = serde_json::to_string_pretty(v)
        .map_err(|e| CliError::failure(format!("cannot render JSON: {e}")))?;
    s.push('\n');
    Ok(s)
}

pub(crate) fn csv_text(header: &[&str], rows: &[Vec<String>]) -> Result<Output, CliError> {
    let mut w = csv::Writer::from_writer(Vec::new());
    let fail = |e: csv::Error| CliError::failure(format!("cannot render CSV: {e}"));
    w.write_record(header).map_err(fail)?;
    for r in rows {
        w.write_record(r).map_err(fail)?;
    }
    let bytes = w
        .into_inner()
        .map_err(|e| CliError::failure(format!("cannot render CSV: {e}")))?;
    Ok(String::from_utf8(bytes).expect("CSV of UTF-8 fields is UTF-8"))
}

/// A CSV cell for a number: plain decimal notation (Rust never writes an exponent), or empty
/// where the value is undefined (an error relative to a zero measurement), never `inf`/`NaN`.
pub(crate) fn csv_number(x: f64) -> String {
    if x.is_finite() {
        x.to_string()
    } else {
        String::new()
    }
}

/// Renders a listing: a JSON array (a single object when `footer` is `None`, i.e. one item was
/// asked for), CSV rows, or a table followed by `footer`. `cells(item, plain)` gives a row:
/// formatted for the table, plain numbers for CSV (whose `csv_header` names the units).
fn listing<T: Serialize>(
    format: Format,
    items: &[T],
    header: &[&str],
    csv_header: &[&str],
    cells: impl Fn(&T, bool) -> Vec<String>,
    footer: Option<&str>,
) -> Result<Output, CliError> {
    match format {
        Format::Json => match (footer, items) {
            (None, [one]) => json_line(one),
            _ => json_line(&items),
        },
        Format::Csv => csv_text(
            csv_header,
            &items.iter().map(|i| cells(i, true)).collect::<Vec<_>>(),
        ),
        Format::Table => {
            let mut t = Table::new(header);
            for i in items {
                t.row(&cells(i, false));
            }
            let mut out = t.render();
            out.push_str(footer.unwrap_or_default());
            Ok(out)
        }
    }
}

// ---- models ----------------------------------------------------------------------------------

#[derive(Serialize)]
struct ModelRow<'a> {
    #[serde(flatten)]
    spec: &'a ModelSpec,
    params: u64,
    weight_bytes: u64,
    kv_bytes_per_token: u64,
}

/// `kvplan models`.
pub fn models(args: &ModelsArgs) -> Result<Output, CliError> {
    let specs: Vec<ModelSpec> = match &args.model {
        Some(m) => vec![ModelSpec::resolve(m)?],
        None => ModelSpec::preset_names()
            .iter()
            .map(|n| ModelSpec::preset(n))
            .collect::<Result<_, _>>()?,
    };
    let rows: Vec<ModelRow> = specs
        .iter()
        .map(|s| ModelRow {
            spec: s,
            params: s.params(),
            weight_bytes: s.weight_bytes(),
            kv_bytes_per_token: s.kv_bytes_per_token(),
        })
        .collect();
    let header = [
        "model", "family", "layers", "hidden", "heads", "kv_heads", "head_dim", "ffn", "vocab",
        "dtype", "params", "weights", "kv/token",
    ];
    let csv_header = [
        "model",
        "family",
        "layers",
        "hidden",
        "heads",
        "kv_heads",
        "head_dim",
        "ffn",
        "vocab",
        "dtype",
        "params",
        "weight_bytes",
        "kv_bytes_per_token",
    ];
    let cells = |r: &ModelRow, plain: bool| -> Vec<String> {
        let s = r.spec;
        let mut v = vec![
            s.name.clone(),
            format!("{:?}", s.family).to_lowercase(),
            s.num_layers.to_string(),
            s.hidden.to_string(),
            s.num_heads.to_string(),
            s.num_kv_heads.to_string(),
            s.head_dim.to_string(),
            s.ffn_dim.to_string(),
            s.vocab.to_string(),
            s.dtype.to_string(),
        ];
        if plain {
            v.extend([
                r.params.to_string(),
                r.weight_bytes.to_string(),
                r.kv_bytes_per_token.to_string(),
            ]);
        } else {
            v.extend([
                format!("{:.2}B", r.params as f64 / 1e9),
                gib(r.weight_bytes),
                format!("{} KiB", r.kv_bytes_per_token / 1024),
            ]);
        }
        v
    };
    let footer = "\nAny Hugging Face config.json of the llama, mistral, qwen2, gemma2, opt or falcon\nfamilies works too: --model path/to/config.json (or the directory holding it)\n";
    listing(
        args.output.format,
        &rows,
        &header,
        &csv_header,
        cells,
        args.model.is_none().then_some(footer),
    )
}

// ---- hardware --------------------------------------------------------------------------------

/// `kvplan hardware`.
pub fn hardware(args: &HardwareArgs) -> Result<Output, CliError> {
    if let (Some(name), Format::Table) = (&args.hardware, args.output.format)
        && let Ok(text) = HardwareProfile::preset_text(name)
        && !name.ends_with(".toml")
    {
        // The preset file itself: every number with its source, ready to copy and edit.
        return Ok(text.to_string());
    }
    let profiles: Vec<HardwareProfile> = match &args.hardware {
        Some(h) => vec![HardwareProfile::resolve(h)?],
        None => HardwareProfile::preset_names()
            .iter()
            .map(|n| HardwareProfile::preset(n))
            .collect::<Result<_, _>>()?,
    };
    let header = [
        "hardware",
        "gpu",
        "memory",
        "mem GB/s",
        "fp16 TFLOP/s",
        "bf16 TFLOP/s",
        "link",
        "h2d pinned GB/s",
        "d2h pinned GB/s",
        "host RAM",
    ];
    // The CSV names are the profile file's fields.
    let csv_header = [
        "hardware",
        "gpu",
        "memory_bytes",
        "hbm_gbps",
        "fp16_tflops",
        "bf16_tflops",
        "link",
        "h2d_pinned_gbps",
        "d2h_pinned_gbps",
        "host_ram_bytes",
    ];
    let cells = |p: &HardwareProfile, plain: bool| -> Vec<String> {
        let bytes = |b: u64| if plain { b.to_string() } else { gib(b) };
        let num = |x: f64, decimals: usize| {
            if plain {
                x.to_string()
            } else {
                format!("{x:.decimals$}")
            }
        };
        vec![
            p.name.clone(),
            p.gpu.name.clone(),
            bytes(p.gpu.memory_bytes),
            num(p.gpu.mem_bandwidth / 1e9, 0),
            num(p.gpu.peak_flops.fp16 / 1e12, 1),
            num(p.gpu.peak_flops.bf16 / 1e12, 1),
            p.link.kind.clone(),
            num(p.link.h2d_pinned / 1e9, 2),
            num(p.link.d2h_pinned / 1e9, 2),
            bytes(p.host.ram_bytes),
        ]
    };
    let footer = "\n`kvplan hardware NAME` prints a preset with the source of every number. To adapt one,\nwrite a TOML file with `base = \"NAME\"` (a preset, or a profile file relative to this\none) and only the fields you change, e.g.\n  base = \"a100-40g-pcie4\"\n  [link]\n  h2d_pinned_gbps = 20.0\nand pass its path to --hardware.\n";
    listing(
        args.output.format,
        &profiles,
        &header,
        &csv_header,
        cells,
        args.hardware.is_none().then_some(footer),
    )
}

// ---- plan kvpr -------------------------------------------------------------------------------

pub(crate) fn describe(p: &Plan) -> String {
    format!(
        "{} on {}: batch {}{}, prompt {}, gen {} ({}, weights {}, {} host memory)",
        p.model,
        p.hardware,
        p.shape.batch,
        if p.shape.gpu_batches > 1 {
            format!(" x {} GPU batches", p.shape.gpu_batches)
        } else {
            String::new()
        },
        p.shape.prompt,
        p.shape.gen_len,
        match p.order {
            kvplan_planner::plan::Order::RowByRow => "row-by-row",
            kvplan_planner::plan::Order::ColumnByColumn => "column-by-column",
        },
        if p.weights_on_gpu {
            "on GPU"
        } else {
            "offloaded"
        },
        match p.host_memory {
            kvplan_vocab::schedule::HostMemory::Pinned => "pinned",
            kvplan_vocab::schedule::HostMemory::Pageable => "pageable",
        }
    )
}

/// `kvplan plan kvpr`.
pub fn plan_kvpr(args: &PlanArgs) -> Result<Output, CliError> {
    let sc = args.run.resolve(Some(Strategy::Kvpr.as_str().into()))?;
    let cost = sc.cost_model();
    let p = sc.plan_with(&cost, Strategy::Kvpr)?;
    let problem0 = kvplan_planner::plan::split_problem(
        &cost,
        &sc.model,
        &sc.shape,
        p.weights_on_gpu,
        p.host_memory,
        1,
        sc.options.split_model,
    );
    let steps: Vec<serde_json::Value> = p
        .decisions
        .splits()
        .iter()
        .map(|s| {
            json!({
                "step": s.step,
                "seq_len": s.seq_len,
                "recompute_tokens": s.split.recompute_tokens,
                "recompute_fraction": recompute_fraction(s),
                "layer_s": s.split.layer_s,
                "transfer_only_layer_s": s.split.transfer_only_s,
                "bound": s.split.bound,
                "reason": s.split.reason,
            })
        })
        .collect();
    match args.output.format {
        Format::Json => json_line(&json!({
            "strategy": "kvpr",
            "model": p.model,
            "hardware": p.hardware,
            "batch": p.shape.batch,
            "gpu_batches": p.shape.gpu_batches,
            "prompt": p.shape.prompt,
            "gen": p.shape.gen_len,
            "order": p.order,
            "weights_on_gpu": p.weights_on_gpu,
            "host_memory": p.host_memory,
            "act_bytes_per_token_layer": sc.model.act_bytes_per_token_layer(),
            "kv_bytes_per_token_layer": sc.model.kv_bytes_per_token_layer(),
            "explanation": p.decisions.splits().first().map(|s| s.split.reason.explain(&problem0, &s.split)),
            "memory": p.memory,
            "peak_gpu_bytes": p.memory.gpu_bytes(),
            "peak_host_bytes": p.memory.host_bytes(),
            "steps": steps,
            "notes": p.notes,
        })),
        Format::Csv => csv_text(
            &[
                "step",
                "seq_len",
                "recompute_tokens",
                "recompute_fraction",
                "layer_s",
                "transfer_only_layer_s",
                "bound",
                "reason",
            ],
            &p.decisions
                .splits()
                .iter()
                .map(|s| {
                    vec![
                        s.step.to_string(),
                        s.seq_len.to_string(),
                        s.split.recompute_tokens.to_string(),
                        recompute_fraction(s).to_string(),
                        s.split.layer_s.to_string(),
                        s.split.transfer_only_s.to_string(),
                        serde_json::to_value(s.split.bound)
                            .unwrap()
                            .as_str()
                            .unwrap()
                            .to_string(),
                        serde_json::to_value(s.split.reason)
                            .unwrap()
                            .as_str()
                            .unwrap()
                            .to_string(),
                    ]
                })
                .collect::<Vec<_>>(),
        ),
        Format::Table => {
            let mut out = String::new();
            let _ = writeln!(out, "KVPR plan: {}", describe(&p));
            let _ = writeln!(
                out,
                "per token and layer: activations {} B, K+V {} B (GQA group {})",
                sc.model.act_bytes_per_token_layer(),
                sc.model.kv_bytes_per_token_layer(),
                sc.model.gqa_group()
            );
            if let Some(s) = p.decisions.splits().first() {
                let _ = writeln!(
                    out,
                    "why (step 1): {}",
                    s.split.reason.explain(&problem0, &s.split)
                );
            }
            let _ = writeln!(
                out,
                "memory: GPU {} ({}), host {}",
                gib(p.memory.gpu_bytes()),
                p.memory
                    .gpu
                    .iter()
                    .map(|i| format!("{} {}", i.kind.name(), gib(i.bytes)))
                    .collect::<Vec<_>>()
                    .join(", "),
                gib(p.memory.host_bytes())
            );
            for n in &p.notes {
                let _ = writeln!(out, "note: {n}");
            }
            out.push('\n');
            let mut t = Table::new(&[
                "step",
                "s'",
                "recompute l",
                "l/s'",
                "layer time",
                "transfer-only",
                "saved",
                "bound",
            ]);
            for s in p.decisions.splits() {
                t.row(&[
                    s.step.to_string(),
                    s.seq_len.to_string(),
                    s.split.recompute_tokens.to_string(),
                    pct(recompute_fraction(s)),
                    secs(s.split.layer_s),
                    secs(s.split.transfer_only_s),
                    pct(saved_fraction(s)),
                    serde_json::to_value(s.split.bound)
                        .unwrap()
                        .as_str()
                        .unwrap()
                        .to_string(),
                ]);
            }
            out.push_str(&t.render());
            Ok(out)
        }
    }
}

/// Resolves a `plan <planner>` command's scenario with the strategy fixed.
fn plan_for(args: &PlanArgs, strategy: Strategy) -> Result<(Scenario, Plan), CliError> {
    let sc = args.run.resolve(Some(strategy.as_str().into()))?;
    let p = sc.plan_with(&sc.cost_model(), strategy)?;
    Ok((sc, p))
}

fn memory_line(p: &Plan) -> String {
    format!(
        "memory: GPU {} ({}), host {}",
        gib(p.memory.gpu_bytes()),
        p.memory
            .gpu
            .iter()
            .map(|i| format!("{} {}", i.kind.name(), gib(i.bytes)))
            .collect::<Vec<_>>()
            .join(", "),
        gib(p.memory.host_bytes())
    )
}

/// `kvplan plan runahead`.
pub fn plan_runahead(args: &PlanArgs) -> Result<Output, CliError> {
    let (sc, p) = plan_for(args, Strategy::Runahead)?;
    let d = p
        .decisions
        .runahead()
        .ok_or_else(|| CliError::failure("the KV-Runahead planner returned no decisions"))?;
    match args.output.format {
        Format::Json => json_line(&json!({
            "strategy": "runahead",
            "model": p.model,
            "hardware": p.hardware,
            "context": sc.shape.prompt,
            "devices": sc.options.runahead.devices,
            "devices_used": d.devices_used,
            "partition": d.partition,
            "ttft_s": d.ttft_s,
            "speedup": d.speedup,
            "details": d,
            "memory": p.memory,
            "notes": p.notes,
        })),
        Format::Csv => csv_text(
            &["device", "tokens"],
            &d.partition
                .iter()
                .enumerate()
                .map(|(i, t)| vec![i.to_string(), t.to_string()])
                .collect::<Vec<_>>(),
        ),
        Format::Table => {
            let mut out = String::new();
            let _ = writeln!(
                out,
                "KV-Runahead plan: {} on {}, context {} tokens, {} devices offered, {} used",
                p.model, p.hardware, sc.shape.prompt, sc.options.runahead.devices, d.devices_used
            );
            let _ = writeln!(
                out,
                "partition (tokens per device, in chain order): {:?}",
                d.partition
            );
            let mut t = Table::new(&["method", "TTFT", "vs one device"]);
            for (method, v, speedup) in ttft_speedups(&d.ttft_s) {
                let name = match method {
                    "runahead" => "runahead (chosen)",
                    "single_device" => "single device",
                    "even_chain" => "even chunks, same chain",
                    "tensor_parallel" => "tensor parallel + all-gather",
                    other => other,
                };
                t.row(&[name.to_string(), secs(v), format!("x{speedup:.3}")]);
            }
            out.push_str(&t.render());
            let _ = writeln!(out, "speed-up over one device: x{:.3}", d.speedup);
            let _ = writeln!(
                out,
                "decode device: {} (holds the whole KV cache); peer link traffic {} ({:.1} GB/s): {:?} bytes sent per device",
                d.decode_device,
                gib(d.peer_bytes),
                d.link_gbps,
                d.peer_bytes_by_device
            );
            let _ = writeln!(out, "{}", memory_line(&p));
            for n in &p.notes {
                let _ = writeln!(out, "note: {n}");
            }
            Ok(out)
        }
    }
}

/// `kvplan plan headinfer`.
pub fn plan_headinfer(args: &PlanArgs) -> Result<Output, CliError> {
    let (sc, p) = plan_for(args, Strategy::HeadInfer)?;
    let d = p
        .decisions
        .headinfer()
        .ok_or_else(|| CliError::failure("the HeadInfer planner returned no decisions"))?;
    match args.output.format {
        Format::Json => json_line(&json!({
            "strategy": "headinfer",
            "model": p.model,
            "hardware": p.hardware,
            "context": sc.shape.prompt,
            "details": d,
            "memory": p.memory,
            "peak_gpu_bytes": p.memory.gpu_bytes(),
            "peak_host_bytes": p.memory.host_bytes(),
            "ops": p.schedule.len(),
            "notes": p.notes,
        })),
        Format::Csv => csv_text(
            &[
                "context",
                "heads_per_group",
                "chunk_tokens",
                "peak_gpu_bytes",
                "peak_host_bytes",
            ],
            &[vec![
                sc.shape.prompt.to_string(),
                d.heads_per_group.to_string(),
                d.chunk_tokens.to_string(),
                p.memory.gpu_bytes().to_string(),
                p.memory.host_bytes().to_string(),
            ]],
        ),
        Format::Table => {
            let mut out = String::new();
            let _ = writeln!(
                out,
                "HeadInfer plan: {} on {}, context {} tokens, batch {}, gen {}",
                p.model, p.hardware, sc.shape.prompt, sc.shape.batch, sc.shape.gen_len
            );
            let _ = writeln!(
                out,
                "KV heads per offload group: {} ({} groups per layer); prefill chunk: {} tokens",
                d.heads_per_group, d.groups_per_layer, d.chunk_tokens
            );
            let _ = writeln!(out, "{}", memory_line(&p));
            for n in &p.notes {
                let _ = writeln!(out, "note: {n}");
            }
            Ok(out)
        }
    }
}

// ---- capacity --------------------------------------------------------------------------------

/// `kvplan capacity`.
pub fn capacity(args: &CapacityArgs) -> Result<Output, CliError> {
    use kvplan_planner::headinfer::{CapacityOptions, MemStrategy, MemoryConfig, capacity_report};
    if args.slo.is_some() {
        return crate::serve::slo_capacity(args);
    }
    let required = |v: &Option<String>, flag: &str| {
        v.clone().ok_or_else(|| {
            CliError::input(format!(
                "{flag}: required (or --slo SPEC for the serving capacity under latency objectives)"
            ))
        })
    };
    let mut model = ModelSpec::resolve(&required(&args.model, "--model")?)?;
    if let Some(d) = &args.dtype {
        let dt = kvplan_vocab::DType::parse(d).ok_or_else(|| {
            CliError::input(format!(
                "--dtype: unknown dtype '{d}'; use fp16, bf16 or fp32"
            ))
        })?;
        model = model.with_dtype(dt);
    }
    let hw = HardwareProfile::resolve(&required(&args.hardware, "--hardware")?)?;
    let strategies = args
        .strategies
        .iter()
        .map(|s| {
            MemStrategy::parse(s).ok_or_else(|| {
                CliError::input(format!(
                    "--strategy: unknown strategy '{s}'; use one of {}",
                    MemStrategy::ALL.map(MemStrategy::as_str).join(", ")
                ))
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let whole = |field: &str, v: i64| -> Result<u32, CliError> {
        u32::try_from(v).ok().filter(|&x| x >= 1).ok_or_else(|| {
            CliError::input(format!(
                "{field}: must be a whole number of at least 1 (got {v})"
            ))
        })
    };
    let gib_bytes = |field: &str, v: f64, zero_ok: bool| -> Result<u64, CliError> {
        if v.is_finite() && (v > 0.0 || (zero_ok && v == 0.0)) {
            Ok((v * (1u64 << 30) as f64) as u64)
        } else {
            Err(CliError::input(format!(
                "{field}: must be {} GiB (got {v})",
                if zero_ok {
                    "zero or more"
                } else {
                    "a positive number of"
                }
            )))
        }
    };
    let options = CapacityOptions {
        host_ram_bytes: args
            .host_ram
            .map(|g| gib_bytes("--host-ram", g, false))
            .transpose()?,
        config: MemoryConfig {
            batch: whole("--batch", args.batch)?,
            chunk_tokens: whole("--chunk", args.chunk)?,
            heads_per_group: whole("--heads-per-group", args.heads_per_group)?,
            runtime_reserve: gib_bytes("--runtime-reserve", args.runtime_reserve, true)?,
        },
    };
    let r = capacity_report(&model, &hw, &strategies, &options)?;
    match args.output.format {
        Format::Json => json_line(&r),
        Format::Csv => csv_text(
            &[
                "strategy",
                "max_context_tokens",
                "binding_limit",
                "gpu_bytes",
                "host_bytes",
            ],
            &r.strategies
                .iter()
                .map(|s| {
                    vec![
                        s.strategy.as_str().to_string(),
                        s.max_context_tokens.to_string(),
                        s.binding_limit.as_str().to_string(),
                        s.gpu_bytes.to_string(),
                        s.host_bytes.to_string(),
                    ]
                })
                .collect::<Vec<_>>(),
        ),
        Format::Table => {
            let mut out = String::new();
            let _ = writeln!(
                out,
                "capacity: {} on {} (batch {})",
                r.model, r.hardware, options.config.batch
            );
            let mut t = Table::new(&[
                "strategy",
                "max context",
                "binding limit",
                "GPU at max",
                "host at max",
            ]);
            for s in &r.strategies {
                let k = s.max_context_tokens as f64 / 1024.0;
                t.row(&[
                    s.strategy.as_str().to_string(),
                    if k >= 1024.0 {
                        format!("{} ({:.2}M)", s.max_context_tokens, k / 1024.0)
                    } else {
                        format!("{} ({:.1}K)", s.max_context_tokens, k)
                    },
                    s.binding_limit.as_str().to_string(),
                    gib(s.gpu_bytes),
                    gib(s.host_bytes),
                ]);
            }
            out.push_str(&t.render());
            let _ = writeln!(out, "(K = 1024 tokens, as the HeadInfer paper counts)");
            for n in &r.notes {
                let _ = writeln!(out, "note: {n}");
            }
            Ok(out)
        }
    }
}

// ---- simulate --------------------------------------------------------------------------------

/// One line on the planner's decisions: KVPR's split across the decode steps, HeadInfer's
/// head groups and chunk, KV-Runahead's partition and TTFT.
pub(crate) fn split_summary(p: &Plan) -> Option<String> {
    if let Some(d) = p.decisions.runahead() {
        return Some(format!(
            "runahead: {} devices used, partition {:?}; TTFT runahead {}, one device {}, even chain {}, tensor parallel {} (x{:.3} over one device)",
            d.devices_used,
            d.partition,
            secs(d.ttft_s.runahead),
            secs(d.ttft_s.single_device),
            secs(d.ttft_s.even_chain),
            secs(d.ttft_s.tensor_parallel),
            d.speedup
        ));
    }
    if let Some(d) = p.decisions.headinfer() {
        return Some(format!(
            "headinfer: {} KV heads per offload group, prefill chunk {} tokens",
            d.heads_per_group, d.chunk_tokens
        ));
    }
    let (first, last) = (p.decisions.splits().first()?, p.decisions.splits().last()?);
    let frac = |s| pct(recompute_fraction(s));
    Some(format!(
        "kvpr split: recompute {} of {} cached tokens per layer at step {} ({}) .. {} of {} at step {} ({}); `kvplan plan kvpr` shows every step and why",
        first.split.recompute_tokens,
        first.seq_len,
        first.step,
        frac(first),
        last.split.recompute_tokens,
        last.seq_len,
        last.step,
        frac(last)
    ))
}

pub(crate) const CSV_FIELDS: [&str; 24] = [
    "strategy",
    "model",
    "hardware",
    "source",
    "batch",
    "gpu_batches",
    "prompt",
    "gen",
    "weights_on_gpu",
    "prefill_latency_s",
    "decode_latency_s",
    "decode_throughput_tok_s",
    "total_latency_s",
    "gpu_busy_fraction",
    "gpu_idle_s",
    "h2d_bytes",
    "d2h_bytes",
    "peak_gpu_bytes",
    "peak_host_bytes",
    "mean_recompute_fraction",
    "load_weight_s",
    "load_cache_s",
    "load_activation_s",
    "compute_s",
];

pub(crate) fn csv_row(r: &RunReport) -> Vec<String> {
    let b = &r.decode_breakdown;
    vec![
        r.strategy.clone(),
        r.model.clone(),
        r.hardware.clone(),
        r.source.clone(),
        r.batch.to_string(),
        r.gpu_batches.to_string(),
        r.prompt.to_string(),
        r.gen_len.to_string(),
        r.weights_on_gpu.to_string(),
        r.prefill_latency_s.to_string(),
        r.decode_latency_s.to_string(),
        r.decode_throughput_tok_s.to_string(),
        r.total_latency_s.to_string(),
        r.gpu_busy_fraction.to_string(),
        r.gpu_idle_s.to_string(),
        r.h2d_bytes.to_string(),
        r.d2h_bytes.to_string(),
        r.peak_gpu_bytes.to_string(),
        r.peak_host_bytes.to_string(),
        r.mean_recompute_fraction.to_string(),
        b.load_weight_s.to_string(),
        b.load_cache_s.to_string(),
        b.load_activation_s.to_string(),
        b.compute_s.to_string(),
    ]
}

pub(crate) fn metric_rows(r: &RunReport) -> Vec<(&'static str, String)> {
    let b = &r.decode_breakdown;
    let mut v = vec![
        ("prefill latency (TTFT)", secs(r.prefill_latency_s)),
        ("decode latency", secs(r.decode_latency_s)),
        (
            "decode throughput",
            format!("{:.1} tok/s", r.decode_throughput_tok_s),
        ),
        ("GPU busy (decode)", pct(r.gpu_busy_fraction)),
        ("GPU idle (decode)", secs(r.gpu_idle_s)),
        (
            "H2D link busy (decode)",
            r.stream_busy_fraction
                .get("gpu0.h2d")
                .map_or("-".into(), |f| pct(*f)),
        ),
        ("recomputed (mean l/s')", pct(r.mean_recompute_fraction)),
        ("H2D traffic", gib(r.h2d_bytes)),
        ("D2H traffic", gib(r.d2h_bytes)),
        ("peak GPU memory", gib(r.peak_gpu_bytes)),
        ("peak host memory", gib(r.peak_host_bytes)),
    ];
    for c in Category::ALL {
        let secs_ = b.get(c);
        if secs_ > 0.0 || matches!(c, Category::Compute) {
            let name: &'static str = match c {
                Category::LoadWeight => "decode load-weight",
                Category::LoadCache => "decode load-cache",
                Category::LoadActivation => "decode load-activation",
                Category::Compute => "decode compute",
                Category::StoreCache => "decode store-cache",
                Category::StoreActivation => "decode store-activation",
                Category::PeerTransfer => "decode peer-transfer",
            };
            v.push((name, secs(secs_)));
        }
    }
    v.push(("schedule ops", r.ops.to_string()));
    v
}

fn write_trace(path: &Path, runs: &[&SimulatedRun]) -> Result<(), CliError> {
    let runs: Vec<Run> = runs
        .iter()
        .map(|s| Run {
            name: s.plan.strategy.as_str(),
            schedule: &s.plan.schedule,
            timeline: &s.timeline,
        })
        .collect();
    let csv = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("csv"));
    write_output(path, "--trace", |w| {
        if csv {
            write_csv(&runs, w)
        } else {
            write_chrome_trace(&runs, w)
        }
    })
}

/// `kvplan simulate`.
pub fn simulate(args: &SimulateArgs) -> Result<Output, CliError> {
    let compared: &[Strategy] = if args.compare { &COMPARED } else { &[] };
    let sc = args.run.resolve_running(args.strategy.clone(), compared)?;
    if !args.compare {
        let s = simulate_scenario(&sc)?;
        if let Some(path) = &args.trace {
            write_trace(path, &[&s])?;
        }
        let r = &s.report;
        return match args.output.format {
            Format::Json => json_line(r),
            Format::Csv => csv_text(&CSV_FIELDS, &[csv_row(r)]),
            Format::Table => {
                let mut out = String::new();
                let _ = writeln!(out, "{} (simulated): {}", r.strategy, describe(&s.plan));
                let mut t = Table::new(&["metric", "value"]);
                for (k, v) in metric_rows(r) {
                    t.row(&[k.to_string(), v]);
                }
                out.push_str(&t.render());
                if let Some(line) = split_summary(&s.plan) {
                    let _ = writeln!(out, "{line}");
                }
                for n in &r.notes {
                    let _ = writeln!(out, "note: {n}");
                }
                if let Some(path) = &args.trace {
                    let _ = writeln!(
                        out,
                        "timeline written to {} (open in https://ui.perfetto.dev)",
                        path.display()
                    );
                }
                Ok(out)
            }
        };
    }

    // --compare: the library's rules pick the strategies and skip those that cannot run.
    let c = compare(&sc)?;
    let (done, skipped) = (&c.runs, &c.skipped);
    if let Some(path) = &args.trace {
        write_trace(path, &done.iter().collect::<Vec<_>>())?;
    }
    match args.output.format {
        Format::Json => json_line(&json!({
            "model": sc.model.name,
            "hardware": sc.hardware.name,
            "batch": sc.shape.batch,
            "gpu_batches": sc.shape.gpu_batches,
            "prompt": sc.shape.prompt,
            "gen": sc.shape.gen_len,
            "results": done.iter().map(|s| &s.report).collect::<Vec<_>>(),
            "skipped": skipped.iter().map(|s| json!({"strategy": s.strategy.as_str(), "reason": s.error.to_string()})).collect::<Vec<_>>(),
            "kvpr_vs_full_transfer": c.kvpr_vs_full_transfer,
        })),
        Format::Csv => csv_text(
            &CSV_FIELDS,
            &done.iter().map(|s| csv_row(&s.report)).collect::<Vec<_>>(),
        ),
        Format::Table => {
            let mut out = String::new();
            let _ = writeln!(
                out,
                "compare (simulated): {}",
                describe(&done[0].plan).replacen(
                    if done[0].plan.weights_on_gpu {
                        ", weights on GPU"
                    } else {
                        ", weights offloaded"
                    },
                    "",
                    1
                )
            );
            let mut header = vec!["metric".to_string()];
            header.extend(done.iter().map(|s| s.report.strategy.clone()));
            let mut t = Table::new(&header);
            let columns: Vec<Vec<(&str, String)>> =
                done.iter().map(|s| metric_rows(&s.report)).collect();
            let mut names: Vec<&str> = Vec::new();
            for c in &columns {
                for (k, _) in c {
                    if !names.contains(k) {
                        names.push(k);
                    }
                }
            }
            let weights_row: Vec<String> = std::iter::once("weights".to_string())
                .chain(done.iter().map(|s| {
                    if s.plan.weights_on_gpu {
                        "GPU".into()
                    } else {
                        "offloaded".into()
                    }
                }))
                .collect();
            t.row(&weights_row);
            for name in names {
                let mut row = vec![name.to_string()];
                for c in &columns {
                    row.push(
                        c.iter()
                            .find(|(k, _)| *k == name)
                            .map(|(_, v)| v.clone())
                            .unwrap_or_else(|| "-".into()),
                    );
                }
                t.row(&row);
            }
            out.push_str(&t.render());
            if let Some(r) = c.kvpr_vs_full_transfer {
                let (l, tp) = (r.decode_latency_ratio, r.throughput_ratio);
                let _ = writeln!(
                    out,
                    "kvpr vs full-transfer: decode latency x{l:.3} ({} lower), throughput x{tp:.3}",
                    pct(1.0 - l)
                );
            }
            if let Some(line) = done.iter().find_map(|s| split_summary(&s.plan)) {
                let _ = writeln!(out, "{line}");
            }
            for s in skipped {
                let _ = writeln!(out, "{}: not run: {}", s.strategy.as_str(), s.error);
            }
            for s in done {
                for n in &s.report.notes {
                    let _ = writeln!(out, "note ({}): {n}", s.report.strategy);
                }
            }
            if let Some(path) = &args.trace {
                let _ = writeln!(
                    out,
                    "timelines written to {} (one process per strategy; open in https://ui.perfetto.dev)",
                    path.display()
                );
            }
            Ok(out)
        }
    }
}
