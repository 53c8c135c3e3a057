//! Schedule builders: the KV-Runahead chain ([`chain_schedule`]), one device's chunk alone
//! ([`chunk_schedule`]) and the tensor-parallel baseline ([`tensor_parallel_schedule`]).

use super::costs::{even_partition, starts};
use kvplan_vocab::layers::layer_kernels;
use kvplan_vocab::layers::{attention_index, embed_op, head_ops};
use kvplan_vocab::model::ModelSpec;
use kvplan_vocab::schedule::{
    OpId, OpKind, Phase, Schedule, ScheduleBuilder, StreamId, StreamKind, Tag,
};

struct Labels {
    embed: kvplan_vocab::schedule::LabelId,
    kernels: Vec<kvplan_vocab::schedule::LabelId>,
    /// Index of the attention op in a layer's kernels.
    attention: usize,
    send: kvplan_vocab::schedule::LabelId,
    head: [kvplan_vocab::schedule::LabelId; 3],
}

fn labels(sb: &mut ScheduleBuilder, m: &ModelSpec) -> Labels {
    let k = layer_kernels(m, 1, 1, 1);
    let h = head_ops(m, 1);
    Labels {
        embed: sb.label("embed"),
        kernels: k.iter().map(|(name, _)| sb.label(name)).collect(),
        attention: attention_index(&k),
        send: sb.label("kv_send"),
        head: h.map(|(name, _)| sb.label(name)),
    }
}

fn tag(phase: Phase, step: u32, layer: u16, device: u16) -> Tag {
    Tag {
        phase,
        step,
        layer,
        batch: 0,
        group: device,
    }
}

/// The KV-Runahead schedule of `partition` (module docs): one compute stream per device
/// (`gpu{i}.compute`), one peer stream per link (`gpu{i}.peer{i+1}`), ops tagged with the device
/// in `group`; with `gen_len > 1`, `gen_len - 1` decode steps on the last device. Returns the
/// schedule and the `sample` op of the prefill, whose end is the TTFT.
///
/// # Panics
/// If `partition` is empty or has a zero chunk.
pub fn chain_schedule(
    m: &ModelSpec,
    batch: u32,
    partition: &[u32],
    gen_len: u32,
) -> (Schedule, OpId) {
    assert!(!partition.is_empty() && partition.iter().all(|&c| c > 0));
    let p = partition.len();
    let layers = m.num_layers as usize;
    let est = p * (layers * 9 + 4) + gen_len as usize * (layers * 8 + 3);
    let mut sb = ScheduleBuilder::with_capacity(est, est * 2);
    let lb = labels(&mut sb, m);
    let mut compute: Vec<StreamId> = Vec::with_capacity(p);
    let mut peer: Vec<StreamId> = Vec::with_capacity(p);
    for i in 0..p {
        compute.push(sb.stream(i as u16, StreamKind::Compute, format!("gpu{i}.compute")));
        if i + 1 < p {
            peer.push(sb.stream(
                i as u16,
                StreamKind::Peer { to: (i + 1) as u16 },
                format!("gpu{i}.peer{}", i + 1),
            ));
        }
    }
    let kv_tok = m.kv_bytes_per_token_layer();
    let st = starts(partition);
    let mut arrive: Vec<Option<OpId>> = vec![None; layers];
    let mut sample = OpId(0);
    for i in 0..p {
        let c = compute[i];
        let dev = i as u16;
        let last = i + 1 == p;
        let k = layer_kernels(m, batch, partition[i], st[i] + partition[i]);
        sb.push(
            embed_op(m, batch, partition[i]),
            c,
            lb.embed,
            tag(Phase::Prefill, 0, Tag::NONE, dev),
            &[],
        );
        let bytes = u64::from(batch) * u64::from(st[i] + partition[i]) * kv_tok;
        let mut sends = vec![None; layers];
        for j in 0..layers {
            let t = tag(Phase::Prefill, 0, j as u16, dev);
            let a = lb.attention;
            let mut qkv = OpId(0);
            for (x, &label) in k[..a].iter().zip(&lb.kernels) {
                qkv = sb.push(x.1, c, label, t, &[]);
            }
            if !last {
                sends[j] = Some(sb.push(
                    OpKind::PeerSend { bytes },
                    peer[i],
                    lb.send,
                    t,
                    &[Some(qkv), arrive[j]],
                ));
            }
            if last || j + 1 < layers {
                sb.push(k[a].1, c, lb.kernels[a], t, &[arrive[j]]);
                for (x, &label) in k.iter().zip(&lb.kernels).skip(a + 1) {
                    sb.push(x.1, c, label, t, &[]);
                }
            }
        }
        if last {
            for ((_, op), label) in head_ops(m, batch).iter().zip(lb.head) {
                sample = sb.push(*op, c, label, tag(Phase::Prefill, 0, Tag::NONE, dev), &[]);
            }
        }
        arrive = sends;
    }
    let n = st[p - 1] + partition[p - 1];
    let c = compute[p - 1];
    let dev = (p - 1) as u16;
    for step in 1..gen_len {
        let k = layer_kernels(m, batch, 1, n + step);
        for j in 0..layers {
            let t = tag(Phase::Decode, step, j as u16, dev);
            for (x, &label) in k.iter().zip(&lb.kernels) {
                sb.push(x.1, c, label, t, &[]);
            }
        }
        for ((_, op), label) in head_ops(m, batch).iter().zip(lb.head) {
            sb.push(*op, c, label, tag(Phase::Decode, step, Tag::NONE, dev), &[]);
        }
    }
    (sb.build(), sample)
}

/// One device's share of a KV-Runahead prefill as a single-device schedule: the embedding of
/// tokens `[start, start + len)` and, per layer, `ln1`, `qkv_proj`, the causal attention of the
/// `len` queries over `start + len` keys, `out_proj` and the FFN, on `gpu0.compute` with nothing
/// to wait for. Running it on one GPU (`exec`, `validate`) measures the per-chunk prefill cost
/// the planner uses: its simulated makespan is `embed + L * layer()` of
/// `ModelCosts::chunk(len, start)` ([`ChunkCosts::chunk`](super::ChunkCosts::chunk)).
pub fn chunk_schedule(m: &ModelSpec, batch: u32, len: u32, start: u32) -> Schedule {
    assert!(len > 0, "a chunk has at least one token");
    let layers = m.num_layers as usize;
    let mut sb = ScheduleBuilder::with_capacity(layers * 8 + 1, 0);
    let lb = labels(&mut sb, m);
    let c = sb.stream(0, StreamKind::Compute, "gpu0.compute");
    sb.push(
        embed_op(m, batch, len),
        c,
        lb.embed,
        tag(Phase::Prefill, 0, Tag::NONE, 0),
        &[],
    );
    let k = layer_kernels(m, batch, len, start + len);
    for j in 0..layers {
        let t = tag(Phase::Prefill, 0, j as u16, 0);
        for (x, &label) in k.iter().zip(&lb.kernels) {
            sb.push(x.1, c, label, t, &[]);
        }
    }
    sb.build()
}

/// The tensor/sequence-parallel baseline: `devices` equal chunks; per layer every device
/// computes its chunk's Q,K,V, then K,V are all-gathered over a ring (`devices - 1` steps, each
/// device forwarding the chunk it received last; about twice the chain's traffic), then each
/// device runs the causal attention of its chunk over the prefix and its FFN; the next layer's
/// all-gather needs every device. The last device samples. Returns the schedule and the
/// `sample` op.
pub fn tensor_parallel_schedule(
    m: &ModelSpec,
    batch: u32,
    context: u32,
    devices: u32,
) -> (Schedule, OpId) {
    let part = even_partition(context, devices);
    let p = part.len();
    if p == 1 {
        return chain_schedule(m, batch, &part, 1);
    }
    let layers = m.num_layers as usize;
    let est = p * layers * (9 + p) + 8;
    let mut sb = ScheduleBuilder::with_capacity(est, est * 2);
    let lb = labels(&mut sb, m);
    let mut compute = Vec::with_capacity(p);
    let mut peer = Vec::with_capacity(p);
    for i in 0..p {
        compute.push(sb.stream(i as u16, StreamKind::Compute, format!("gpu{i}.compute")));
    }
    for i in 0..p {
        let to = (i + 1) % p;
        peer.push(sb.stream(
            i as u16,
            StreamKind::Peer { to: to as u16 },
            format!("gpu{i}.peer{to}"),
        ));
    }
    let kv_tok = m.kv_bytes_per_token_layer();
    let st = starts(&part);
    let kernels: Vec<_> = (0..p)
        .map(|i| layer_kernels(m, batch, part[i], st[i] + part[i]))
        .collect();
    for i in 0..p {
        sb.push(
            embed_op(m, batch, part[i]),
            compute[i],
            lb.embed,
            tag(Phase::Prefill, 0, Tag::NONE, i as u16),
            &[],
        );
    }
    for j in 0..layers {
        let qkv: Vec<OpId> = (0..p)
            .map(|i| {
                let t = tag(Phase::Prefill, 0, j as u16, i as u16);
                let mut last = OpId(0);
                for (x, &label) in kernels[i][..lb.attention].iter().zip(&lb.kernels) {
                    last = sb.push(x.1, compute[i], label, t, &[]);
                }
                last
            })
            .collect();
        // Ring all-gather: at step s device i sends chunk (i - s) mod p to i + 1.
        let mut prev: Vec<OpId> = qkv.clone();
        for s in 0..p - 1 {
            let mut cur = Vec::with_capacity(p);
            for i in 0..p {
                let chunk = (i + p - s) % p;
                let dep = if s == 0 {
                    qkv[i]
                } else {
                    prev[(i + p - 1) % p]
                };
                let bytes = u64::from(batch) * u64::from(part[chunk]) * kv_tok;
                cur.push(sb.push(
                    OpKind::PeerSend { bytes },
                    peer[i],
                    lb.send,
                    tag(Phase::Prefill, 0, j as u16, i as u16),
                    &[Some(dep)],
                ));
            }
            prev = cur;
        }
        for i in 0..p {
            let t = tag(Phase::Prefill, 0, j as u16, i as u16);
            // The gather into device i is complete when the last send from i - 1 has arrived.
            let got = prev[(i + p - 1) % p];
            let a = lb.attention;
            sb.push(kernels[i][a].1, compute[i], lb.kernels[a], t, &[Some(got)]);
            for (x, &label) in kernels[i].iter().zip(&lb.kernels).skip(a + 1) {
                sb.push(x.1, compute[i], label, t, &[]);
            }
        }
    }
    let mut sample = OpId(0);
    for ((_, op), label) in head_ops(m, batch).iter().zip(lb.head) {
        sample = sb.push(
            *op,
            compute[p - 1],
            label,
            tag(Phase::Prefill, 0, Tag::NONE, (p - 1) as u16),
            &[],
        );
    }
    (sb.build(), sample)
}

/// Bytes `schedule` sends over peer links (all ops).
pub(crate) fn peer_bytes(schedule: &Schedule) -> u64 {
    schedule.ops().iter().map(|o| o.kind.link_bytes()).sum()
}
