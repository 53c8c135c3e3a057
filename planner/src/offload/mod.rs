//! The offload planner: plans for one fixed batch with the KV cache offloaded (KVPR, full
//! transfer) or resident (gpu-only): weight placement, the KVPR split, memory, and the schedule.
//! KVPR's linear program is [`kvpr`], its per-step split search [`split`], and the schedule
//! builder [`schedule`].

pub mod kvpr;
pub mod options;
pub mod schedule;
pub mod split;

use kvplan_vocab::cost::CostModel;
use kvplan_vocab::error::{Error, Result};
use kvplan_vocab::hardware::HardwareProfile;
use kvplan_vocab::memory::{
    AttentionImpl, MemoryKind, MemoryPlan, PrefillPass, prefill_working_set,
};
use kvplan_vocab::model::ModelSpec;

use crate::strategy::{Input, Planner};
use crate::types::{
    Decisions, MAX_OPS, Options, Order, Plan, PlanNote, Shape, Strategy, WeightsPlacement,
};
pub use options::{
    KvprOptions, OffloadNote, SplitModel, SplitPolicy, Splits, StepSplit, kv_on_host, splits,
};
use schedule::{Layout, build_schedule};
use split::kvpr_splits;

/// The planner of the three strategies that differ only in where the KV cache lives and
/// whether KVPR's split recomputes part of it: `kvpr`, `full-transfer` and `gpu-only`.
#[derive(Debug, Clone, Copy)]
pub struct Offload(pub Strategy);

impl Planner for Offload {
    fn name(&self) -> &'static str {
        self.0.as_str()
    }

    fn compared(&self) -> bool {
        true
    }

    fn reads(&self) -> &'static [&'static str] {
        if self.0 == Strategy::KVPR {
            &["offload.split"]
        } else {
            &[]
        }
    }

    fn plan(&self, i: &Input<'_>) -> Result<Plan> {
        plan(i.model, i.hw, i.cost, i.shape, self.0, i.options)
    }
}

/// Peak memory of a strategy. `recompute_activations`: KVPR keeps layer inputs for
/// recomputation (only when some step recomputes).
pub fn memory_plan(
    m: &ModelSpec,
    shape: &Shape,
    strategy: Strategy,
    weights_on_gpu: bool,
    recompute_activations: bool,
) -> MemoryPlan {
    let p = m.dtype_bytes();
    let b = u64::from(shape.batch);
    let k = u64::from(shape.gpu_batches);
    let s = u64::from(shape.prompt);
    let len = shape.max_len();
    let h = u64::from(m.hidden);
    let layers = u64::from(m.num_layers);
    let kv_tok = m.kv_bytes_per_token_layer();
    let mut mem = MemoryPlan::default();
    if weights_on_gpu {
        mem.gpu(MemoryKind::Weights, m.weight_bytes());
    } else {
        mem.gpu(
            MemoryKind::WeightBuffers,
            m.embedding_bytes() + 2 * m.layer_weights().total(),
        );
        mem.host(MemoryKind::Weights, m.weight_bytes());
    }
    if kv_on_host(strategy) {
        mem.gpu(MemoryKind::KvLayerBuffers, 2 * b * len * kv_tok);
        mem.host(
            MemoryKind::KvCache,
            shape.total_batch() * len * layers * kv_tok,
        );
    } else {
        mem.gpu(
            MemoryKind::KvCache,
            shape.total_batch() * len * layers * kv_tok,
        );
    }
    if recompute_activations {
        mem.gpu(MemoryKind::RecomputeActivationBuffers, 2 * b * len * h * p);
        mem.host(
            MemoryKind::RecomputeActivations,
            shape.total_batch() * len * layers * h * p,
        );
    }
    // Prefill of one GPU batch (one SDPA pass over the prompt) is the activation peak.
    let act = prefill_working_set(
        m,
        &PrefillPass {
            batch: b,
            q_tokens: s,
            context: s,
            attention: AttentionImpl::Sdpa,
            logits_rows: b,
        },
    );
    mem.gpu(MemoryKind::Activations, act.peak);
    if k > 1 {
        mem.gpu(MemoryKind::HiddenStates, k * b * h * p);
    }
    mem
}

fn fits(mem: &MemoryPlan, hw: &HardwareProfile) -> bool {
    mem.gpu_bytes() <= hw.gpu.usable_bytes()
}

/// Plans KVPR, full transfer or gpu-only (`strategy`) for `shape` of `model` on `hw`; the shape
/// is already validated ([`crate::plan::plan`] dispatches here).
fn plan(
    model: &ModelSpec,
    hw: &HardwareProfile,
    cost: &CostModel,
    shape: &Shape,
    strategy: Strategy,
    options: &Options,
) -> Result<Plan> {
    let mut notes = Vec::new();
    let steps = u64::from(shape.gen_len);
    let est_ops = steps * u64::from(model.num_layers) * u64::from(shape.gpu_batches) * 16;
    if est_ops > MAX_OPS {
        return Err(Error::invalid(
            "workload.gen",
            shape.gen_len,
            format!(
                "the schedule would have about {est_ops} ops (limit {MAX_OPS}); reduce `workload.gen` or `workload.gpu_batches`"
            ),
        ));
    }
    notes.extend(shape.max_position_note(model));
    let what = format!(
        "{} plan for {} on {}",
        strategy.as_str(),
        model.name,
        hw.name
    );
    let kvpr = strategy == Strategy::KVPR;
    // Splits, whether any step recomputes, and the memory that needs, for one weight placement.
    let decide = |weights_on_gpu: bool| -> Result<(Vec<StepSplit>, bool, MemoryPlan)> {
        let splits = if kvpr {
            let o = options.get::<KvprOptions>();
            kvpr_splits(
                cost,
                model,
                shape,
                weights_on_gpu,
                options.memory_kinds(),
                o.split,
                o.split_model,
            )?
        } else {
            Vec::new()
        };
        let keeps_x = splits.iter().any(|s| s.split.recompute_tokens > 0);
        let memory = memory_plan(model, shape, strategy, weights_on_gpu, keeps_x);
        Ok((splits, keeps_x, memory))
    };
    let (weights_on_gpu, (splits, keeps_x, memory)) = match (strategy, options.weights) {
        (Strategy::GPU_ONLY, WeightsPlacement::Offload) => {
            return Err(Error::invalid(
                "offload.weights",
                "offload",
                "gpu-only keeps everything on the GPU; use `strategy` kvpr or full-transfer to offload",
            ));
        }
        (Strategy::GPU_ONLY, _) | (_, WeightsPlacement::Gpu) => (true, decide(true)?),
        (_, WeightsPlacement::Offload) => (false, decide(false)?),
        (_, WeightsPlacement::Auto) => {
            let resident = decide(true)?;
            if fits(&resident.2, hw) {
                (true, resident)
            } else {
                notes.push(PlanNote::new(OffloadNote::WeightsOffloaded {
                    weight_bytes: model.weight_bytes(),
                }));
                (false, decide(false)?)
            }
        }
    };
    if kvpr && !keeps_x {
        notes.push(PlanNote::new(OffloadNote::NoRecompute));
    }
    let gpu_advice = match (strategy, weights_on_gpu) {
        (Strategy::GPU_ONLY, _) => {
            "offload the KV cache (`strategy` kvpr or full-transfer), or reduce `workload.batch` / `workload.prompt` / `workload.gen`"
        }
        (_, true) => {
            "offload the weights (`offload.weights` offload or auto), or reduce `workload.batch` / `workload.prompt`"
        }
        (_, false) => "reduce `workload.batch` or `workload.prompt`, or use a GPU with more memory",
    };
    memory.check(
        hw,
        &what,
        gpu_advice,
        "reduce `workload.batch`, `workload.gpu_batches`, `workload.prompt` or `workload.gen`, or raise host.ram_gib in a profile file",
    )?;
    let layout = Layout {
        model,
        shape,
        strategy,
        weights_on_gpu,
        keeps_x,
        memory: options.memory_kinds(),
    };
    let schedule = build_schedule(&layout, 0..=shape.gen_len - 1, &|step| {
        splits[(step - 1) as usize].split.recompute_tokens
    });
    Ok(Plan {
        strategy,
        model: model.name.clone(),
        hardware: hw.name.clone(),
        shape: *shape,
        order: if shape.gpu_batches > 1 {
            Order::ColumnByColumn
        } else {
            Order::RowByRow
        },
        weights_on_gpu,
        host_memory: options.host_memory,
        memory,
        decisions: if kvpr {
            Decisions::new(Splits(splits))
        } else {
            Decisions::none()
        },
        notes,
        schedule,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvplan_vocab::schedule::{OpKind, Payload};

    fn setup(model: &str, hw: &str) -> (ModelSpec, HardwareProfile, CostModel) {
        let m = ModelSpec::preset(model).unwrap();
        let hw = HardwareProfile::preset(hw).unwrap();
        let c = CostModel::new(&hw);
        (m, hw, c)
    }

    #[test]
    fn kvpr_plan_is_valid_and_splits_grow_with_context() {
        let (m, hw, c) = setup("opt-6.7b", "a100-40g-pcie4");
        let shape = Shape {
            batch: 64,
            gpu_batches: 1,
            prompt: 128,
            gen_len: 8,
        };
        let p = plan(&m, &hw, &c, &shape, Strategy::KVPR, &Options::default()).unwrap();
        p.schedule.validate().unwrap();
        assert!(p.weights_on_gpu);
        assert_eq!(splits(&p.decisions).len(), 7);
        assert!(
            splits(&p.decisions)
                .iter()
                .all(|s| s.split.recompute_tokens > 0 && s.split.recompute_tokens < s.seq_len)
        );
        assert!(
            splits(&p.decisions)
                .windows(2)
                .all(|w| w[0].split.recompute_tokens <= w[1].split.recompute_tokens)
        );
    }

    #[test]
    fn gqa_model_gets_zero_split_everywhere() {
        let (m, hw, c) = setup("llama-3-8b", "a100-40g-pcie4");
        let shape = Shape {
            batch: 8,
            gpu_batches: 1,
            prompt: 1024,
            gen_len: 4,
        };
        let p = plan(&m, &hw, &c, &shape, Strategy::KVPR, &Options::default()).unwrap();
        assert!(
            splits(&p.decisions)
                .iter()
                .all(|s| s.split.recompute_tokens == 0)
        );
        assert!(
            splits(&p.decisions)
                .iter()
                .all(|s| s.split.reason == kvpr::Reason::ActivationsNotCheaper)
        );
    }

    #[test]
    fn gpu_only_that_cannot_fit_says_by_how_much() {
        let (m, hw, c) = setup("opt-30b", "a100-40g-pcie4");
        let shape = Shape {
            batch: 64,
            gpu_batches: 1,
            prompt: 512,
            gen_len: 32,
        };
        let e = plan(&m, &hw, &c, &shape, Strategy::GPU_ONLY, &Options::default()).unwrap_err();
        let s = e.to_string();
        assert!(
            s.contains("short by") && s.contains("`strategy` kvpr"),
            "{s}"
        );
    }

    #[test]
    fn column_schedule_loads_each_layer_once_per_step() {
        let (m, hw, c) = setup("opt-30b", "a100-40g-pcie4");
        let shape = Shape {
            batch: 8,
            gpu_batches: 4,
            prompt: 64,
            gen_len: 3,
        };
        let p = plan(&m, &hw, &c, &shape, Strategy::KVPR, &Options::default()).unwrap();
        assert!(!p.weights_on_gpu);
        assert_eq!(p.order, Order::ColumnByColumn);
        let weight_loads = p
            .schedule
            .ops()
            .iter()
            .filter(|o| {
                matches!(
                    o.kind,
                    OpKind::H2D {
                        payload: Payload::Weights,
                        ..
                    }
                )
            })
            .count();
        assert_eq!(weight_loads, 3 * 48 * 3);
        // Every decode (layer, GPU batch) unit fetches its cache as KV, as activations, or both.
        let mut units = std::collections::BTreeSet::new();
        for o in p.schedule.ops() {
            if let OpKind::H2D {
                payload: Payload::Cache | Payload::RecomputeActivation,
                ..
            } = o.kind
            {
                units.insert((o.tag.step, o.tag.layer, o.tag.batch));
            }
        }
        assert_eq!(units.len(), 2 * 48 * 4);
        // With weights crossing the link anyway, the GPU idles: recompute every cached token.
        assert!(
            splits(&p.decisions)
                .iter()
                .all(|s| s.split.recompute_tokens == s.seq_len)
        );
    }
}
