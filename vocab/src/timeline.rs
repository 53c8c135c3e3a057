//! Timelines: when each op of a [`Schedule`] ran, predicted (simulator) or measured (executor),
//! with the metrics both report and the exports both write (Chrome trace JSON, CSV).

use std::io::Write;

use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::schedule::{Category, Op, OpId, OpKind, Phase, Schedule, StreamKind, Tag};

/// Start and end of one op, seconds from the start of the run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Span {
    /// Start time.
    pub start: f64,
    /// End time.
    pub end: f64,
}

impl Span {
    /// `end - start`.
    pub fn duration(&self) -> f64 {
        self.end - self.start
    }
}

/// Where a timeline's times came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Source {
    /// Predicted by the simulator with a hardware profile.
    Simulated {
        /// Profile name.
        hardware: String,
    },
    /// Measured by an executor backend.
    Measured {
        /// `cuda` or `cpu`.
        backend: String,
        /// Device description.
        device: String,
    },
}

/// The times of every op of one schedule: `spans[i]` belongs to op `i`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Timeline {
    /// Where the times came from.
    pub source: Source,
    /// One span per op, indexed by [`OpId`].
    pub spans: Vec<Span>,
    /// The host thread's time on each op (from when it began issuing the op, a synchronisation
    /// before it included, until it was free again: a blocking copy holds it to the copy's
    /// end), indexed by [`OpId`]; empty when the host is not modelled. A measured timeline has
    /// the executor's own issue spans: on CUDA on the host's clock from the first issue (not
    /// aligned with the device spans), on the CPU backend the dispatch before each op.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub host: Vec<Span>,
}

impl Timeline {
    /// The span of `op`.
    pub fn span(&self, op: OpId) -> Span {
        self.spans[op.index()]
    }

    /// Latest end time.
    pub fn makespan(&self) -> f64 {
        self.spans.iter().fold(0.0, |m, s| m.max(s.end))
    }
}

/// Busy time of one stream inside the metrics window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StreamMetrics {
    /// Track name.
    pub name: String,
    /// Device index.
    pub device: u16,
    /// Ops on the stream (whole run).
    pub ops: usize,
    /// Seconds busy inside the window.
    pub busy_s: f64,
    /// `busy_s / window length`.
    pub busy_fraction: f64,
}

/// Summed op durations per [`Category`] inside the window (overlapping ops both count).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Breakdown {
    /// Weights host→device.
    pub load_weight_s: f64,
    /// KV cache host→device.
    pub load_cache_s: f64,
    /// Activations host→device.
    pub load_activation_s: f64,
    /// Kernels.
    pub compute_s: f64,
    /// KV cache device→host.
    pub store_cache_s: f64,
    /// Activations device→host.
    pub store_activation_s: f64,
    /// Device→device.
    pub peer_transfer_s: f64,
}

impl Breakdown {
    fn add(&mut self, c: Category, secs: f64) {
        *match c {
            Category::LoadWeight => &mut self.load_weight_s,
            Category::LoadCache => &mut self.load_cache_s,
            Category::LoadActivation => &mut self.load_activation_s,
            Category::Compute => &mut self.compute_s,
            Category::StoreCache => &mut self.store_cache_s,
            Category::StoreActivation => &mut self.store_activation_s,
            Category::PeerTransfer => &mut self.peer_transfer_s,
        } += secs;
    }

    /// The value of one category.
    pub fn get(&self, c: Category) -> f64 {
        match c {
            Category::LoadWeight => self.load_weight_s,
            Category::LoadCache => self.load_cache_s,
            Category::LoadActivation => self.load_activation_s,
            Category::Compute => self.compute_s,
            Category::StoreCache => self.store_cache_s,
            Category::StoreActivation => self.store_activation_s,
            Category::PeerTransfer => self.peer_transfer_s,
        }
    }
}

/// What a run did, measured over a window of its timeline.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Metrics {
    /// End of the last op.
    pub makespan_s: f64,
    /// End of the last prefill kernel, when the first token exists (0 if there is none);
    /// prefill's stores may still drain after it.
    pub prefill_end_s: f64,
    /// Window start.
    pub window_start_s: f64,
    /// Window end.
    pub window_end_s: f64,
    /// Per-stream busy time inside the window.
    pub streams: Vec<StreamMetrics>,
    /// Fraction of the window during which device 0's compute streams ran a kernel.
    pub gpu_busy_fraction: f64,
    /// Window time with no kernel running on device 0.
    pub gpu_idle_s: f64,
    /// Bytes host→device (ops starting inside the window).
    pub h2d_bytes: u64,
    /// Bytes device→host.
    pub d2h_bytes: u64,
    /// Bytes device→device.
    pub peer_bytes: u64,
    /// Per-category op time inside the window (summed over streams).
    pub breakdown: Breakdown,
}

/// Which part of a run [`metrics`] covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Window {
    /// From 0 to the makespan.
    Whole,
    /// From the end of prefill (the first token) to the makespan: every op's time inside it,
    /// whatever its phase tag; bytes of the copies that start inside it.
    Decode,
}

/// Computes [`Metrics`] of `timeline` (which must belong to `schedule`).
pub fn metrics(schedule: &Schedule, timeline: &Timeline, window: Window) -> Metrics {
    let ops = schedule.ops();
    let makespan = timeline.makespan();
    // The first token exists when prefill's last kernel ends; copies it issued (stores of the
    // prompt's KV and activations) may drain later, overlapping decode.
    let prefill_end = last_kernel_end(schedule, &timeline.spans, |t| t.phase == Phase::Prefill);
    let (w0, w1) = match window {
        Window::Whole => (0.0, makespan),
        Window::Decode => (prefill_end, makespan),
    };
    let len = (w1 - w0).max(0.0);
    let n_streams = schedule.streams().len();
    let mut busy = vec![0.0f64; n_streams];
    let mut counts = vec![0usize; n_streams];
    let mut breakdown = Breakdown::default();
    let (mut h2d, mut d2h, mut peer) = (0u64, 0u64, 0u64);
    // Compute intervals on device 0, for the union (several compute streams may overlap).
    let mut gpu_intervals: Vec<(f64, f64)> = Vec::new();
    for (op, span) in ops.iter().zip(&timeline.spans) {
        let s = op.stream.index();
        counts[s] += 1;
        // Time is counted where it falls: a decode prefetch issued during prefill is prefill
        // time, a prefill store draining after the first token is decode time.
        let a = span.start.max(w0);
        let b = span.end.min(w1);
        let inside = (b - a).max(0.0);
        busy[s] += inside;
        breakdown.add(op.kind.category(), inside);
        // Bytes go with the window the copy starts in.
        if window == Window::Whole || span.start >= w0 {
            match op.kind {
                OpKind::H2D { bytes, .. } => h2d += bytes,
                OpKind::D2H { bytes, .. } => d2h += bytes,
                OpKind::PeerSend { bytes } => peer += bytes,
                _ => {}
            }
        }
        let st = &schedule.streams()[s];
        if st.device == 0 && st.kind == StreamKind::Compute && inside > 0.0 {
            gpu_intervals.push((a, b));
        }
    }
    let gpu_busy = union_length(&mut gpu_intervals);
    let frac = |x: f64| if len > 0.0 { x / len } else { 0.0 };
    Metrics {
        makespan_s: makespan,
        prefill_end_s: prefill_end,
        window_start_s: w0,
        window_end_s: w1,
        streams: schedule
            .streams()
            .iter()
            .enumerate()
            .map(|(i, st)| StreamMetrics {
                name: st.name.clone(),
                device: st.device,
                ops: counts[i],
                busy_s: busy[i],
                busy_fraction: frac(busy[i]),
            })
            .collect(),
        gpu_busy_fraction: frac(gpu_busy),
        gpu_idle_s: (len - gpu_busy).max(0.0),
        h2d_bytes: h2d,
        d2h_bytes: d2h,
        peer_bytes: peer,
        breakdown,
    }
}

/// When the last kernel (an op on a compute stream) whose tag passes `keep` ends (0 if none): the
/// end of a phase or step. Copies it issued may still drain after it.
pub fn last_kernel_end(schedule: &Schedule, spans: &[Span], keep: impl Fn(&Tag) -> bool) -> f64 {
    let streams = schedule.streams();
    schedule
        .ops()
        .iter()
        .zip(spans)
        .filter(|(o, _)| keep(&o.tag) && streams[o.stream.index()].kind == StreamKind::Compute)
        .fold(0.0f64, |m, (_, s)| m.max(s.end))
}

/// Total length covered by a set of intervals.
fn union_length(iv: &mut [(f64, f64)]) -> f64 {
    // Intervals from one stream arrive sorted; sorting handles several streams.
    iv.sort_by(|x, y| x.0.total_cmp(&y.0).then(x.1.total_cmp(&y.1)));
    let mut total = 0.0;
    let mut cur: Option<(f64, f64)> = None;
    for &(a, b) in iv.iter() {
        match cur {
            Some((ca, cb)) if a <= cb => cur = Some((ca, cb.max(b))),
            Some((ca, cb)) => {
                total += cb - ca;
                cur = Some((a, b));
            }
            None => cur = Some((a, b)),
        }
    }
    if let Some((a, b)) = cur {
        total += b - a;
    }
    total
}

/// One run to export: a name (Perfetto process), its schedule and its timeline.
pub struct Run<'a> {
    /// Process name in the trace, column `run` in CSV.
    pub name: &'a str,
    /// The schedule.
    pub schedule: &'a Schedule,
    /// Its timeline.
    pub timeline: &'a Timeline,
}

impl Run<'_> {
    /// Each op of the schedule with its span on the timeline.
    fn ops(&self) -> impl Iterator<Item = (&Op, &Span)> {
        self.schedule.ops().iter().zip(&self.timeline.spans)
    }
}

fn tag_value(v: u16) -> serde_json::Value {
    if v == Tag::NONE {
        serde_json::Value::Null
    } else {
        json!(v)
    }
}

/// Writes runs as Chrome trace-event JSON (opens in Perfetto and chrome://tracing): one process
/// per run, one thread (track) per stream, one complete event per op, times in microseconds; a
/// run whose timeline models the host thread has a `host` track after the streams, one event
/// per op issued (`launch`, `issue` or `sync + ...` and the op's label).
pub fn write_chrome_trace(runs: &[Run], out: &mut dyn Write) -> std::io::Result<()> {
    out.write_all(b"{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n")?;
    let mut first = true;
    let mut emit = |out: &mut dyn Write, v: serde_json::Value| -> std::io::Result<()> {
        if !first {
            out.write_all(b",\n")?;
        }
        first = false;
        serde_json::to_writer(&mut *out, &v)?;
        Ok(())
    };
    for (pid, run) in runs.iter().enumerate() {
        emit(
            out,
            json!({"ph":"M","pid":pid,"tid":0,"name":"process_name","args":{"name":run.name}}),
        )?;
        emit(
            out,
            json!({"ph":"M","pid":pid,"tid":0,"name":"process_sort_index","args":{"sort_index":pid}}),
        )?;
        for (tid, st) in run.schedule.streams().iter().enumerate() {
            emit(
                out,
                json!({"ph":"M","pid":pid,"tid":tid,"name":"thread_name","args":{"name":st.name}}),
            )?;
            emit(
                out,
                json!({"ph":"M","pid":pid,"tid":tid,"name":"thread_sort_index","args":{"sort_index":tid}}),
            )?;
        }
        let host_tid = run.schedule.streams().len();
        if !run.timeline.host.is_empty() {
            emit(
                out,
                json!({"ph":"M","pid":pid,"tid":host_tid,"name":"thread_name","args":{"name":"host"}}),
            )?;
            emit(
                out,
                json!({"ph":"M","pid":pid,"tid":host_tid,"name":"thread_sort_index","args":{"sort_index":host_tid}}),
            )?;
        }
        for (i, (op, span)) in run.ops().enumerate() {
            if let Some(h) = run.timeline.host.get(i) {
                let what = if op.kind.category() == Category::Compute {
                    "launch"
                } else {
                    "issue"
                };
                emit(
                    out,
                    json!({
                        "ph": "X",
                        "pid": pid,
                        "tid": host_tid,
                        "name": format!("{what} {}", run.schedule.label(op)),
                        "cat": "host",
                        "ts": h.start * 1e6,
                        "dur": h.duration() * 1e6,
                        "args": {"op": i},
                    }),
                )?;
            }
            let mut args = json!({
                "op": i,
                "phase": op.tag.phase,
                "step": op.tag.step,
                "layer": tag_value(op.tag.layer),
                "batch": op.tag.batch,
                "group": tag_value(op.tag.group),
                "kind": op.kind,
            });
            let bytes = op.kind.link_bytes();
            if bytes > 0 {
                args["bytes"] = json!(bytes);
            }
            emit(
                out,
                json!({
                    "ph": "X",
                    "pid": pid,
                    "tid": op.stream.0,
                    "name": run.schedule.label(op),
                    "cat": op.kind.category().as_str(),
                    "ts": span.start * 1e6,
                    "dur": span.duration() * 1e6,
                    "args": args,
                }),
            )?;
        }
    }
    out.write_all(b"\n]}\n")?;
    Ok(())
}

/// The columns of the timeline CSV ([`write_csv`]), in order.
pub const CSV_COLUMNS: [&str; 16] = [
    "run",
    "op",
    "stream",
    "device",
    "label",
    "category",
    "phase",
    "step",
    "layer",
    "batch",
    "group",
    "start_s",
    "end_s",
    "duration_s",
    "bytes",
    "flops",
];

/// Writes runs as CSV, one row per op.
pub fn write_csv(runs: &[Run], out: &mut dyn Write) -> std::io::Result<()> {
    let mut w = csv::Writer::from_writer(out);
    w.write_record(CSV_COLUMNS)?;
    let opt = |v: u16| {
        if v == Tag::NONE {
            String::new()
        } else {
            v.to_string()
        }
    };
    for run in runs {
        for (i, (op, span)) in run.ops().enumerate() {
            let st = &run.schedule.streams()[op.stream.index()];
            w.write_record([
                run.name.to_string(),
                i.to_string(),
                st.name.clone(),
                st.device.to_string(),
                run.schedule.label(op).to_string(),
                op.kind.category().as_str().to_string(),
                match op.tag.phase {
                    Phase::Prefill => "prefill".into(),
                    Phase::Decode => "decode".into(),
                },
                op.tag.step.to_string(),
                opt(op.tag.layer),
                op.tag.batch.to_string(),
                opt(op.tag.group),
                span.start.to_string(),
                span.end.to_string(),
                span.duration().to_string(),
                op.kind.link_bytes().to_string(),
                op.kind.flops().to_string(),
            ])?;
        }
    }
    w.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn union_merges_overlaps() {
        let mut v = vec![(0.0, 1.0), (0.5, 2.0), (3.0, 4.0)];
        assert_eq!(union_length(&mut v), 3.0);
        assert_eq!(union_length(&mut []), 0.0);
    }
}
