//! The CLI's words for what the library reports by scenario field: each field's flag, and the
//! messages of scenario errors and notes, naming both (`--batch (workload.batch)`).

use std::sync::{Mutex, PoisonError};

use kvplan_planner::scenario::{Field, Note};

use crate::error::CliError;

/// The one table of the flag that sets each scenario field: the planner's scenario (the first
/// 19 rows, [`Field`]'s names), the serving scenario (`workload.*`, `serve.*`) and the capacity
/// commands' own settings. Every library error and note names a field; the binary names its
/// flag through this table (a test holds every row to an option the command line has).
const FLAGS: [(&str, &str); 101] = [
    ("model", "--model"),
    ("hardware", "--hardware"),
    ("strategy", "--strategy"),
    ("dtype", "--dtype"),
    ("quantization", "--quantization"),
    ("kv_cache_dtype", "--kv-cache-dtype"),
    ("implementation", "--implementation"),
    ("workload.batch", "--batch"),
    ("workload.gpu_batches", "--gpu-batches"),
    ("workload.prompt", "--prompt"),
    ("workload.gen", "--gen"),
    ("offload.weights", "--weights"),
    ("offload.host_memory", "--host-memory"),
    ("offload.split", "--split"),
    ("offload.split_model", "--split-model"),
    ("headinfer.heads_per_group", "--heads-per-group"),
    ("headinfer.chunk", "--chunk"),
    ("runahead.devices", "--devices"),
    ("runahead.link_gbps", "--link-gbps"),
    ("runahead.link_latency_us", "--link-latency-us"),
    // `kvplan serve`
    ("workload.arrivals", "--arrivals"),
    ("workload.qps", "--qps"),
    ("workload.cv", "--arrivals gamma:CV"),
    ("workload.prompt_lengths", "--lengths"),
    ("workload.output_lengths", "--output-lengths"),
    ("workload.requests", "--requests"),
    ("workload.seed", "--seed"),
    ("workload.trace", "--requests-trace"),
    ("workload.time_scale", "--time-scale"),
    ("workload.start_s", "--start"),
    ("serve.block_size", "--block-size"),
    ("serve.gpu_memory_utilization", "--gpu-memory-utilization"),
    ("serve.swap_space_gib", "--swap-space-gib"),
    ("serve.max_num_seqs", "--max-num-seqs"),
    ("serve.max_num_batched_tokens", "--max-num-batched-tokens"),
    ("serve.scheduler", "--scheduler"),
    ("serve.preemption", "--preemption"),
    ("serve.tensor_parallel_size", "--tensor-parallel-size"),
    ("serve.enable_expert_parallel", "--enable-expert-parallel"),
    ("serve.max_model_len", "--max-model-len"),
    ("serve.num_gpu_blocks_override", "--num-gpu-blocks-override"),
    (
        "serve.long_prefill_token_threshold",
        "--long-prefill-token-threshold",
    ),
    (
        "serve.max_cudagraph_capture_size",
        "--max-cudagraph-capture-size",
    ),
    ("serve.enable_prefix_caching", "--enable-prefix-caching"),
    ("serve.enable_chunked_prefill", "--enable-chunked-prefill"),
    ("serve.async_scheduling", "--async-scheduling"),
    ("serve.cold_start", "--cold-start"),
    ("workload.shared_prefix.groups", "--prefix-groups"),
    (
        "workload.shared_prefix.users_per_group",
        "--users-per-group",
    ),
    (
        "workload.shared_prefix.system_prompt_len",
        "--system-prompt-len",
    ),
    ("workload.shared_prefix.question_len", "--question-len"),
    ("workload.conversation.conversations", "--conversations"),
    ("workload.conversation.turns", "--turns"),
    (
        "workload.conversation.first_message_len",
        "--first-message-len",
    ),
    ("workload.conversation.message_len", "--message-len"),
    ("workload.conversation.think_time_s", "--think-time"),
    ("workload.conversation.max_context", "--max-context"),
    ("serve.quantization", "--quantization"),
    ("serve.kv_cache_dtype", "--kv-cache-dtype"),
    ("serve.dtype", "--dtype"),
    ("serve.vllm_version", "--vllm-version"),
    ("serve.kv_offloading_size_gib", "--kv-offloading-size"),
    ("serve.kv_offloading_backend", "--kv-offloading-backend"),
    ("serve.kv_offloading_eviction", "--kv-offloading-eviction"),
    ("serve.kv_reload", "--kv-reload"),
    ("cluster.data_parallel_size", "--data-parallel-size"),
    ("cluster.router", "--router"),
    ("cluster.router_staleness_s", "--router-staleness"),
    ("cluster.router_latency_us", "--router-latency-us"),
    ("cluster.router_weights", "--router-weights"),
    ("cluster.replica.count", "--replica count=N"),
    ("cluster.prefill_replicas", "--prefill-replicas"),
    ("cluster.decode_replicas", "--decode-replicas"),
    ("cluster.kv_transfer", "--kv-transfer"),
    ("cluster.prefill.serve.tensor_parallel_size", "--prefill-tp"),
    ("cluster.decode.serve.tensor_parallel_size", "--decode-tp"),
    ("cluster.interconnect.gbps", "--interconnect-gbps"),
    (
        "cluster.interconnect.latency_us",
        "--interconnect-latency-us",
    ),
    ("cluster.autoscale", "--autoscale"),
    ("cluster.autoscale.min_replicas", "--autoscale min=N"),
    ("cluster.autoscale.max_replicas", "--autoscale max=N"),
    (
        "cluster.autoscale.initial_replicas",
        "--autoscale initial=N",
    ),
    ("cluster.autoscale.metric", "--autoscale metric=M"),
    ("cluster.autoscale.target", "--autoscale target=X"),
    ("cluster.autoscale.interval_s", "--autoscale interval=S"),
    ("cluster.autoscale.scale_up_delay_s", "--autoscale delay=S"),
    ("cluster.autoscale.cooldown_s", "--autoscale cooldown=S"),
    // `kvplan capacity`, `kvplan serve-capacity`
    ("capacity.host_ram", "--host-ram"),
    ("capacity.runtime_reserve", "--runtime-reserve"),
    ("capacity.rel_tol", "--qps-tolerance"),
    ("plan.prices", "--price"),
    ("plan.shard", "--shard"),
    ("plan.max_gpus", "--max-gpus"),
    ("plan.layouts", "--layouts"),
    ("plan.routers", "--routers"),
    // `kvplan sweep`, `kvplan merge`
    ("sweep.out", "--out"),
    ("sweep.resume", "--resume"),
    ("sweep.shard", "--shard"),
    // `kvplan diff`: the kind of output `simulate --compare` prints
    ("simulate.compare", "--compare"),
    ("format", "--format"),
    ("backend", "--backend"),
];

/// Flags typed under another name (clap aliases, and the `--no-` half of an on/off pair):
/// messages name the one the user typed.
const ALIASES: [(&str, &str); 5] = [
    ("--prompt", "--context"),
    ("--hardware", "--profile"),
    ("--enable-chunked-prefill", "--no-enable-chunked-prefill"),
    ("--enable-prefix-caching", "--no-enable-prefix-caching"),
    ("--async-scheduling", "--no-async-scheduling"),
];

/// `flag`, or its alias where the command line used the alias (`--context 0` is reported as
/// `--context`, not `--prompt`).
fn as_typed(flag: &'static str) -> &'static str {
    match ALIASES.iter().find(|(f, _)| *f == flag) {
        Some(&(_, alias)) if typed(alias) && !typed(flag) => alias,
        _ => flag,
    }
}

/// Whether the command line names the option `name` (`--batch`, `--batch=2`).
pub fn typed(name: &str) -> bool {
    std::env::args_os().skip(1).any(|a| {
        a.to_str()
            .is_some_and(|a| a == name || a.strip_prefix(name).is_some_and(|r| r.starts_with('=')))
    })
}

/// Holds one note naming the options of `flags` the command line gave, which `with` ignores,
/// and why (nothing when none was given).
pub fn note_ignored(flags: &[&str], with: &str, why: &str) {
    let given: Vec<&str> = flags.iter().copied().filter(|f| typed(f)).collect();
    if given.is_empty() {
        return;
    }
    let verb = if given.len() == 1 { "is" } else { "are" };
    hold_note(format!(
        "{} {verb} ignored with {with}: {why}",
        given.join(", ")
    ));
}

/// The flag that sets the field named `name` (`workload.batch` → `--batch`).
pub fn flag_of(name: &str) -> Option<&'static str> {
    FLAGS
        .iter()
        .find(|(f, _)| *f == name)
        .map(|(_, s)| as_typed(s))
}

/// A library message with the fields it names in backquotes (`` `workload.batch` ``) written as
/// their flags (`--batch`): the one place the binary turns a library's advice into the words of
/// its command line. Only the table's fields are rewritten: dotted ones wherever they stand, a
/// top-level one (`` `strategy` ``) only where the text gives it a value (`` `strategy` kvpr ``),
/// so a parser's "expected one of `model`, `strategy`" keeps its words.
pub fn flags_in_text(text: &str) -> String {
    let mut out = text.to_string();
    for &(field, flag) in FLAGS.iter() {
        let flag = as_typed(flag);
        let quoted = format!("`{field}`");
        if field.contains('.') {
            out = out.replace(&quoted, flag);
            continue;
        }
        let mut rest = out.as_str();
        let mut done = String::with_capacity(out.len());
        while let Some(i) = rest.find(&quoted) {
            let after = &rest[i + quoted.len()..];
            let valued = after.starts_with(' ')
                && after[1..].starts_with(|c: char| c.is_ascii_alphanumeric());
            done.push_str(&rest[..i]);
            done.push_str(if valued { flag } else { &quoted });
            rest = after;
        }
        done.push_str(rest);
        out = done;
    }
    out
}

/// The flag that sets scenario field `field` (`offload.weights` → `--weights`, or the alias
/// the command line used), or the field in backquotes where no flag sets it.
pub fn flag_name(field: &str) -> String {
    match FLAGS.iter().find(|(f, _)| *f == field) {
        Some(&(_, flag)) => as_typed(flag).to_string(),
        None => format!("`{field}`"),
    }
}

/// A plan's notes as this command line words them: each scenario field the note names
/// (`offload.weights`) by its flag (`--weights`).
pub fn word_notes(notes: &mut [kvplan_planner::plan::PlanNote]) {
    for n in notes {
        *n = n.worded(&flag_name);
    }
}

/// A simulated run's notes (its plan's and its report's) as this command line words them.
pub fn word_run(run: &mut kvplan_planner::run::SimulatedRun) {
    word_notes(&mut run.plan.notes);
    word_notes(&mut run.report.notes);
}

/// How a library error names a field in the CLI: a planner field by its flag alone (`--batch`;
/// `workload.batch x workload.prompt` → `--batch x --prompt`), a serving field by flag and field
/// (`--tensor-parallel-size (serve.tensor_parallel_size)`), any other (a profile's
/// `link.h2d_pinned_gbps`) as it is.
fn error_label(field: &str) -> String {
    let planner = |name: &str| Field::ALL.iter().any(|f| f.as_str() == name);
    if planner(field) {
        return flag_of(field).unwrap_or(field).to_string();
    }
    if let Some((a, b)) = field.split_once(" x ")
        && planner(a)
        && planner(b)
    {
        return format!("{} x {}", error_label(a), error_label(b));
    }
    label(field)
}

/// A library error on its way to the user, its field named by its flag.
impl From<kvplan_vocab::Error> for CliError {
    fn from(e: kvplan_vocab::Error) -> Self {
        let e = match e {
            kvplan_vocab::Error::InvalidValue {
                field,
                value,
                message,
            } => kvplan_vocab::Error::InvalidValue {
                field: error_label(&field),
                value,
                message,
            },
            other => other,
        };
        CliError::new(e.is_input_error(), e.to_string())
    }
}

/// How messages name the field at `path` (of either kind of scenario): `--batch
/// (workload.batch)`, `--qps (workload.qps)`; top-level fields, whose flag is their name, by the
/// flag alone (`--dtype`); a field no flag sets by its path (`serve.watermark`).
pub fn label(path: &str) -> String {
    match flag_of(path) {
        Some(f) if !path.contains('.') => f.to_string(),
        Some(f) => format!("{f} ({path})"),
        None => path.to_string(),
    }
}

/// A scenario error of either kind on its way to the user: its message, which starts with the
/// field at fault by its path (`workload.batch: ...`, `serve.block_size: ...`), with that path
/// named by its flag ([`label`]); a missing model or hardware with where to find one; a failure
/// of the model, the hardware or the planner as the vocabulary's errors go.
impl From<kvplan_run::ScenarioError> for CliError {
    fn from(e: kvplan_run::ScenarioError) -> Self {
        use kvplan_planner::scenario::ScenarioError as P;
        use kvplan_run::ScenarioError as E;
        use kvplan_serve::scenario::ScenarioError as S;
        let e = match e {
            E::Simulate(p) => match *p {
                P::Planner(v) => return v.into(),
                P::Missing { field } => {
                    return missing(field.as_str(), ("opt-6.7b", "a100-40g-pcie4"));
                }
                p => E::from(p),
            },
            E::Serve(s) => match *s {
                S::Planner(v) => return v.into(),
                S::Missing { field } => return missing(field, ("llama-2-7b", "a100-80g-sxm")),
                S::Serve(k @ kvplan_serve::Error::NoKvMemory { .. }) => {
                    return CliError::input(format!(
                        "{k}: the model does not fit this GPU with room for its KV cache; use a GPU with more memory, a smaller model, or a higher --gpu-memory-utilization"
                    ));
                }
                // A scheduler that stalls is a bug; every other serving error is the input's
                // (a max_model_len the cache cannot hold, a trace out of order, ...).
                S::Serve(f @ kvplan_serve::Error::Stalled { .. }) => {
                    return CliError::failure(format!("serving simulation failed: {f}"));
                }
                s => E::from(s),
            },
            E::Run(r) => return (*r).into(),
            e => e,
        };
        let text = e.to_string();
        let message = match e.field() {
            Some(f) if text.starts_with(&format!("{f}:")) => {
                format!("{}{}", label(&f), &text[f.len()..])
            }
            // `workload.batch x workload.prompt: ...`: a product of two fields.
            _ => match text.split_once(": ") {
                Some((head, rest)) if head.contains(" x ") => {
                    format!("{}: {rest}", error_label(head))
                }
                _ => text,
            },
        };
        CliError::new(e.is_input_error(), message)
    }
}

/// `kvplan capacity`'s input, its field at fault named by its flag; a missing model or hardware
/// with the other question the command answers.
impl From<kvplan_planner::headinfer::CapacityInputError> for CliError {
    fn from(e: kvplan_planner::headinfer::CapacityInputError) -> Self {
        use kvplan_planner::headinfer::CapacityInputError as E;
        let field = match e {
            E::Invalid(v) => return v.into(),
            E::Missing { field } | E::UnknownChoice { field, .. } => field,
            _ => return CliError::input(e.to_string()),
        };
        let slo = " (or --slo SPEC for the serving capacity under latency objectives)";
        let hint = matches!(e, E::Missing { .. })
            .then_some(slo)
            .unwrap_or_default();
        let (flag, text) = (label(field), e.to_string());
        CliError::input(format!("{flag}{}{hint}", &text[field.len()..]))
    }
}

/// `model` or `hardware` not given: what to give, with a preset of the command's kind.
fn missing(field: &str, (model, hardware): (&str, &str)) -> CliError {
    CliError::input(match field {
        "model" => format!(
            "--model is required (a preset such as {model}, or a config.json path; `kvplan models` lists presets)"
        ),
        "hardware" => format!(
            "--hardware is required (a preset such as {hardware}, or a profile TOML path; `kvplan hardware` lists presets)"
        ),
        other => format!("{} is required", label(other)),
    })
}

/// An op-level scenario error, as [`kvplan_run::ScenarioError`]s go.
impl From<kvplan_planner::scenario::ScenarioError> for CliError {
    fn from(e: kvplan_planner::scenario::ScenarioError) -> Self {
        kvplan_run::ScenarioError::from(e).into()
    }
}

/// A serving scenario error, as [`kvplan_run::ScenarioError`]s go.
/// `--confidence` and `--band-draws` as band settings (`None`: no bands asked for), a setting
/// out of range refused by the flag that set it.
pub fn band_settings(
    confidence: Option<f64>,
    draws: u32,
) -> Result<Option<kvplan_serve::bands::BandSettings>, CliError> {
    use kvplan_serve::bands::{BandError, BandSettings};
    let Some(coverage) = confidence else {
        return Ok(None);
    };
    let settings = BandSettings {
        coverage,
        draws,
        seed: 0,
    };
    settings.check().map_err(|e| {
        CliError::input(match e {
            BandError::Coverage(c) => {
                format!("--confidence: {c} must be above 0 and below 1 (0.8 is 80%)")
            }
            BandError::Draws(n) => format!("--band-draws: {n} must be from 2 to 1000"),
        })
    })?;
    Ok(Some(settings))
}

pub fn serve_error(e: kvplan_serve::scenario::ScenarioError) -> CliError {
    kvplan_run::ScenarioError::from(e).into()
}

/// Notes of the run, held until it succeeds: a run that ends in an error prints the error
/// alone, not advice about settings of a run that did not happen.
static NOTES: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Holds a note for stderr (`note: TEXT`), printed once the command has succeeded.
pub fn hold_note(text: String) {
    let mut n = NOTES.lock().unwrap_or_else(PoisonError::into_inner);
    if !n.contains(&text) {
        n.push(text);
    }
}

/// The notes held, in the order given.
pub fn take_notes() -> Vec<String> {
    std::mem::take(&mut NOTES.lock().unwrap_or_else(PoisonError::into_inner))
}

/// The one-line message of a note (printed after `note: `): a field with its value by flag,
/// value and path (`--split 130 (offload.split)`, `--strategy kvpr`), a field alone by [`label`].
pub fn note(n: &Note) -> String {
    n.render(|path, value| match (flag_of(path), value) {
        (Some(f), Some(v)) if path.contains('.') => format!("{f} {v} ({path})"),
        (Some(f), Some(v)) => format!("{f} {v}"),
        (None, Some(v)) => format!("{path} = {v}"),
        (_, None) => label(path),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_row_is_an_option_of_the_command_line() {
        use clap::CommandFactory;
        let cli = crate::commands::Cli::command();
        let longs: Vec<String> = (cli.get_subcommands())
            .flat_map(|c| c.get_arguments().filter_map(|a| a.get_long()))
            .map(|l| format!("--{l}"))
            .collect();
        for (field, flag) in FLAGS {
            let option = flag.split(' ').next().unwrap();
            assert!(longs.iter().any(|l| l == option), "{field}: {flag}");
        }
    }

    #[test]
    fn every_field_has_a_flag() {
        for f in Field::ALL {
            assert!(flag_of(f.as_str()).is_some(), "{f}");
        }
        assert_eq!(
            label(Field::WorkloadBatch.as_str()),
            "--batch (workload.batch)"
        );
        assert_eq!(label(Field::Dtype.as_str()), "--dtype");
    }
}

#[cfg(test)]
mod text_tests {
    use super::flags_in_text;

    #[test]
    fn advice_names_flags_and_leaves_other_backquotes() {
        assert_eq!(
            flags_in_text("reduce `workload.batch` or `workload.prompt`; `strategy` kvpr"),
            "reduce --batch or --prompt; --strategy kvpr"
        );
        assert_eq!(
            flags_in_text("a.toml: missing field `model`; `link.h2d_pinned_gbps`"),
            "a.toml: missing field `model`; `link.h2d_pinned_gbps`"
        );
        let parser = "unknown field `serve`, expected one of `kind`, `model`, `strategy`, `dtype`";
        assert_eq!(flags_in_text(parser), parser);
    }
}

/// The error of a serving run in which no request finished: what the library says, and which
/// flag would let the commonest reason's requests through. Its report goes to stdout before it.
pub fn nothing_finished(
    n: &kvplan_serve::output::NothingFinished,
    r: &kvplan_serve::config::Resolved,
    stdout: String,
) -> CliError {
    let fix = match n.rejected.iter().max_by_key(|(_, count)| *count) {
        Some(("prompt-too-long" | "exceeds-context", _)) => format!(
            "; raise --max-model-len (now {}) or shorten the prompts",
            r.max_model_len
        ),
        Some(("exceeds-kv-capacity", _)) => "; a request's KV at full length needs more blocks than the GPU holds: raise --gpu-memory-utilization or --tensor-parallel-size, use --kv-cache-dtype fp8, or shorten the requests".to_string(),
        Some(("exceeds-batch-tokens", _)) => format!(
            "; raise --max-num-batched-tokens (now {}) or let the scheduler chunk prompts (--enable-chunked-prefill)",
            r.max_num_batched_tokens
        ),
        Some(("empty-request", _)) => {
            "; every request needs at least one prompt and one output token".to_string()
        }
        _ => String::new(),
    };
    CliError::no_answer(stdout, format!("{n}{fix}"))
}
