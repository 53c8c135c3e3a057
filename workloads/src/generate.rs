//! Turning a checked spec and a seed into requests.

use std::collections::HashMap;
use std::io::{self, Write};
use std::sync::Arc;

use rand::rngs::ChaCha8Rng;
use rand::{RngExt, SeedableRng};
use rand_distr::{Distribution, Exp, Gamma, LogNormal, Zipf};

use crate::columns::TRACE_HEADER;
use crate::error::{Error, Result};
use crate::request::{Follows, Request};
use crate::segment::{NameHash, Segment, format_prefix, format_segment_id};
use crate::spec::{
    Arrivals, ConversationSpec, LengthSpec, SharedPrefixSpec, SyntheticSpec, ThinkTime,
    WorkloadSpec, check_prompt_fits,
};
use crate::trace::Trace;

/// Random stream numbers: each part of a workload draws from its own stream. New quantities get
/// new numbers, so adding one leaves every existing workload's draws unchanged.
const STREAM_ARRIVALS: u8 = 1;
const STREAM_PROMPT: u8 = 2;
const STREAM_OUTPUT: u8 = 3;
const STREAM_ROWS: u8 = 4;
/// Shared prefix: system prompt lengths (one per group).
const STREAM_SYSTEM: u8 = 5;
/// Shared prefix: question lengths (one per user, group-major).
const STREAM_QUESTION: u8 = 6;
/// Shared prefix: the order in which the users' prompts cycle.
const STREAM_ORDER: u8 = 7;
/// Conversations: turns per conversation.
const STREAM_TURNS: u8 = 8;
/// Conversations: message lengths (first and later, in turn order).
const STREAM_MESSAGES: u8 = 9;
/// Conversations: think times.
const STREAM_THINK: u8 = 10;

/// ChaCha8 keyed by the seed's little-endian bytes (key bytes 0..8) and the stream number (key
/// byte 8), the other key bytes zero. Fully specified by the ChaCha algorithm, so the same on
/// every platform and every release of the `chacha20` crate.
fn stream(seed: u64, stream: u8) -> ChaCha8Rng {
    let mut key = [0u8; 32];
    key[..8].copy_from_slice(&seed.to_le_bytes());
    key[8] = stream;
    ChaCha8Rng::from_seed(key)
}

enum Gaps {
    Zero,
    Exp(Exp<f64>),
    Gamma(Gamma<f64>),
    /// Thinning of a Poisson process at `peak`: rate `mean - amp · cos(2πt / period)`.
    Diurnal {
        peak: f64,
        mean: f64,
        amp: f64,
        period: f64,
    },
}

enum Lengths {
    Fixed(u32),
    Uniform { lo: u32, hi: u32 },
    Zipf { lo: u32, n: u64, dist: Zipf<f64> },
    LogNormal { dist: LogNormal<f64>, max: u32 },
    Empirical(Vec<u32>),
}

impl Lengths {
    fn sample(&self, rng: &mut ChaCha8Rng) -> u32 {
        match self {
            Lengths::Fixed(n) => *n,
            Lengths::Uniform { lo, hi } => rng.random_range(*lo..=*hi),
            Lengths::Zipf { lo, n, dist } => {
                // Zipf samples are whole numbers in 1..=n, held as f64.
                let rank = (dist.sample(rng) as u64).clamp(1, *n);
                lo + (rank - 1) as u32
            }
            Lengths::LogNormal { dist, max } => {
                let x = dist.sample(rng).round();
                // NaN cannot occur (median > 0, sigma finite); clamp handles the tails.
                x.clamp(1.0, f64::from(*max)) as u32
            }
            Lengths::Empirical(v) => v[rng.random_range(0..v.len())],
        }
    }

    /// The largest length [`sample`](Self::sample) can return.
    fn max(&self) -> u32 {
        match self {
            Lengths::Fixed(n) => *n,
            Lengths::Uniform { hi, .. } => *hi,
            // n = hi - lo + 1, so this is hi.
            Lengths::Zipf { lo, n, .. } => lo + (n - 1) as u32,
            Lengths::LogNormal { max, .. } => *max,
            Lengths::Empirical(v) => v.iter().copied().max().unwrap_or(1),
        }
    }
}

impl Gaps {
    fn new(arrivals: &Arrivals) -> Result<Gaps> {
        Ok(match *arrivals {
            Arrivals::AllAtOnce => Gaps::Zero,
            Arrivals::Poisson { qps } => {
                Gaps::Exp(Exp::new(qps).map_err(|e| Error::OutOfRange {
                    field: "qps",
                    got: qps.to_string(),
                    expected: e.to_string(),
                })?)
            }
            Arrivals::Gamma { qps, cv } => {
                let shape = 1.0 / (cv * cv);
                let scale = 1.0 / (qps * shape);
                Gaps::Gamma(Gamma::new(shape, scale).map_err(|e| Error::OutOfRange {
                    field: "cv",
                    got: cv.to_string(),
                    expected: e.to_string(),
                })?)
            }
            Arrivals::Diurnal {
                peak,
                trough,
                period_s,
            } => Gaps::Diurnal {
                peak,
                mean: (peak + trough) / 2.0,
                amp: (peak - trough) / 2.0,
                period: period_s,
            },
        })
    }

    /// The next arrival time after `t` (the first arrival is at 0 and draws nothing).
    fn next(&self, t: f64, first: bool, rng: &mut ChaCha8Rng) -> f64 {
        if first {
            return t;
        }
        t + match self {
            Gaps::Zero => 0.0,
            Gaps::Exp(d) => d.sample(rng),
            Gaps::Gamma(d) => d.sample(rng),
            &Gaps::Diurnal {
                peak,
                mean,
                amp,
                period,
            } => {
                // Lewis and Shedler's thinning: candidates at the peak rate, each kept with
                // probability rate(t) / peak.
                let mut u = t;
                loop {
                    let e: f64 = rand_distr::Exp1.sample(rng);
                    u += e / peak;
                    let rate = mean - amp * (std::f64::consts::TAU * u / period).cos();
                    let keep: f64 = rng.random();
                    if keep * peak <= rate {
                        break u - t;
                    }
                }
            }
        }
    }
}

enum Think {
    Fixed(f64),
    Exp(Exp<f64>),
    Uniform { lo: f64, hi: f64 },
}

impl Think {
    fn new(spec: &ThinkTime) -> Result<Think> {
        spec.check("conversation.think_time_s")?;
        Ok(match *spec {
            ThinkTime::Fixed(v) => Think::Fixed(v),
            ThinkTime::Exponential { mean } => {
                Think::Exp(Exp::new(1.0 / mean).map_err(|e| Error::OutOfRange {
                    field: "conversation.think_time_s",
                    got: spec.to_string(),
                    expected: e.to_string(),
                })?)
            }
            ThinkTime::Uniform { lo, hi } => Think::Uniform { lo, hi },
        })
    }

    fn sample(&self, rng: &mut ChaCha8Rng) -> f64 {
        match self {
            Think::Fixed(v) => *v,
            Think::Exp(d) => d.sample(rng),
            Think::Uniform { lo, hi } => rng.random_range(*lo..=*hi),
        }
    }
}

enum Plan {
    Synthetic {
        requests: u64,
        gaps: Gaps,
        prompt: Lengths,
        output: Lengths,
        /// When prompt and output resample the same trace: whole rows.
        rows: Option<Vec<(u32, u32)>>,
    },
    Replay(Vec<Request>),
    SharedPrefix {
        requests: u64,
        gaps: Gaps,
        groups: u32,
        users_per_group: u32,
        system: Lengths,
        question: Lengths,
        output: Lengths,
    },
    Conversation {
        conversations: u64,
        gaps: Gaps,
        turns: Lengths,
        first: Lengths,
        message: Lengths,
        output: Lengths,
        think: Think,
        max_context: u32,
        max_requests: Option<u64>,
    },
}

/// A prepared workload: spec checked, distributions built and trace files read, ready to
/// generate requests for any seed without further errors.
pub struct Workload {
    plan: Plan,
}

/// The trace file `path`, named by `field` in its errors.
fn read_trace(field: &'static str, path: &std::path::Path) -> Result<Trace> {
    Trace::from_path(path).map_err(|e| Error::TraceFile {
        field,
        source: Box::new(e),
    })
}

fn lengths(spec: &LengthSpec, field: &'static str, column: usize) -> Result<Lengths> {
    spec.check(field)?;
    let range = |got: String, expected: &str| Error::OutOfRange {
        field,
        got,
        expected: expected.into(),
    };
    Ok(match spec {
        LengthSpec::Fixed(n) => Lengths::Fixed(*n),
        LengthSpec::Uniform { lo, hi } => Lengths::Uniform { lo: *lo, hi: *hi },
        LengthSpec::Zipf { lo, hi, theta } => {
            let n = u64::from(hi - lo) + 1;
            let dist =
                Zipf::new(n as f64, *theta).map_err(|e| range(spec.to_string(), &e.to_string()))?;
            Lengths::Zipf { lo: *lo, n, dist }
        }
        LengthSpec::LogNormal { median, sigma, max } => {
            let dist = LogNormal::new(median.ln(), *sigma)
                .map_err(|e| range(spec.to_string(), &e.to_string()))?;
            Lengths::LogNormal { dist, max: *max }
        }
        LengthSpec::Trace(path) => {
            let trace = read_trace(field, path)?;
            Lengths::Empirical(
                trace
                    .rows()
                    .iter()
                    .map(|r| {
                        if column == 0 {
                            r.prompt_tokens
                        } else {
                            r.output_tokens
                        }
                    })
                    .collect(),
            )
        }
    })
}

impl Workload {
    /// Checks the spec, builds its distributions and reads the trace files it names.
    pub fn new(spec: &WorkloadSpec) -> Result<Workload> {
        let plan = match spec {
            WorkloadSpec::Replay { path, options } => {
                options.check()?;
                Plan::Replay(read_trace("trace", path)?.replay(options)?)
            }
            WorkloadSpec::Synthetic(s) => Workload::synthetic(s)?,
            WorkloadSpec::SharedPrefix(s) => Workload::shared_prefix(s)?,
            WorkloadSpec::Conversation(s) => Workload::conversation(s)?,
        };
        Ok(Workload { plan })
    }

    fn shared_prefix(s: &SharedPrefixSpec) -> Result<Plan> {
        s.check()?;
        let system = lengths(&s.system_prompt, "shared_prefix.system_prompt_len", 0)?;
        let question = lengths(&s.question, "shared_prefix.question_len", 0)?;
        check_prompt_fits(system.max(), question.max())?;
        Ok(Plan::SharedPrefix {
            requests: s.requests,
            gaps: Gaps::new(&s.arrivals)?,
            groups: s.groups,
            users_per_group: s.users_per_group,
            system,
            question,
            output: lengths(&s.output, "output_lengths", 1)?,
        })
    }

    fn conversation(s: &ConversationSpec) -> Result<Plan> {
        s.check()?;
        Ok(Plan::Conversation {
            conversations: s.conversations,
            gaps: Gaps::new(&s.arrivals)?,
            // Not `trace:FILE` (checked), so its bound was checked with the spec.
            turns: lengths(&s.turns, "conversation.turns", 0)?,
            first: lengths(&s.first_message, "conversation.first_message_len", 0)?,
            message: lengths(&s.message, "conversation.message_len", 0)?,
            output: lengths(&s.output, "output_lengths", 1)?,
            think: Think::new(&s.think_time)?,
            max_context: s.max_context,
            max_requests: s.max_requests,
        })
    }

    fn synthetic(s: &SyntheticSpec) -> Result<Plan> {
        s.check()?;
        let gaps = Gaps::new(&s.arrivals)?;
        let same_trace = match (&s.prompt, &s.output) {
            (LengthSpec::Trace(p), LengthSpec::Trace(o)) if p == o => Some(p),
            _ => None,
        };
        if let Some(p) = same_trace {
            let trace = read_trace("prompt_lengths", p)?;
            let rows = trace
                .rows()
                .iter()
                .map(|r| (r.prompt_tokens, r.output_tokens))
                .collect();
            return Ok(Plan::Synthetic {
                requests: s.requests,
                gaps,
                prompt: Lengths::Fixed(1),
                output: Lengths::Fixed(1),
                rows: Some(rows),
            });
        }
        Ok(Plan::Synthetic {
            requests: s.requests,
            gaps,
            prompt: lengths(&s.prompt, "prompt_lengths", 0)?,
            output: lengths(&s.output, "output_lengths", 1)?,
            rows: None,
        })
    }

    /// The requests for `seed` (a replayed trace ignores it), sorted by arrival time then id,
    /// ids `0..n`.
    pub fn generate(&self, seed: u64) -> Vec<Request> {
        match &self.plan {
            Plan::Replay(r) => r.clone(),
            Plan::Synthetic { .. } | Plan::SharedPrefix { .. } => {
                let mut draw = Draw::new(&self.plan, seed);
                std::iter::from_fn(|| draw.next(&self.plan)).collect()
            }
            Plan::Conversation { .. } => {
                conversations_of(&self.plan, seed).expect("a conversation workload fits in memory")
            }
        }
    }

    /// The requests for `seed`, drawn one at a time as they are consumed: the same requests, in
    /// the same order, as [`generate`](Self::generate). Synthetic and shared-prefix workloads
    /// hold only their distributions (memory does not grow with the request count); a replayed
    /// trace is the trace read, and conversations are drawn whole first (their turns are sorted
    /// by arrival), with an error rather than an abort when they do not fit in memory.
    pub fn into_stream(self, seed: u64) -> Result<RequestStream> {
        let draw = match &self.plan {
            Plan::Synthetic { .. } | Plan::SharedPrefix { .. } => Draw::new(&self.plan, seed),
            Plan::Replay(_) => {
                let Plan::Replay(r) = self.plan else {
                    unreachable!()
                };
                return Ok(RequestStream::held(r));
            }
            Plan::Conversation { .. } => {
                return Ok(RequestStream::held(conversations_of(&self.plan, seed)?));
            }
        };
        let len = match &self.plan {
            Plan::Synthetic { requests, .. } | Plan::SharedPrefix { requests, .. } => *requests,
            _ => 0,
        };
        Ok(RequestStream {
            len,
            closed_loop: false,
            source: Source::Drawn {
                plan: Box::new(self.plan),
                draw: Box::new(draw),
            },
        })
    }
}

/// A workload's requests in arrival order, drawn as they are consumed
/// ([`Workload::into_stream`], [`stream_requests`]).
pub struct RequestStream {
    len: u64,
    closed_loop: bool,
    source: Source,
}

enum Source {
    Drawn { plan: Box<Plan>, draw: Box<Draw> },
    Held(std::vec::IntoIter<Request>),
}

impl RequestStream {
    /// A stream over requests already in memory (sorted by arrival).
    pub fn held(requests: Vec<Request>) -> RequestStream {
        RequestStream {
            len: requests.len() as u64,
            closed_loop: requests.iter().any(|r| r.follows.is_some()),
            source: Source::Held(requests.into_iter()),
        }
    }

    /// How many requests the stream gives in all.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether it gives none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether some request [follows](Request::follows) another (then the stream holds its
    /// requests: [`into_held`](Self::into_held) gives them without a copy).
    pub fn closed_loop(&self) -> bool {
        self.closed_loop
    }

    /// The requests not yet drawn, when the stream holds them in memory; otherwise the stream.
    pub fn into_held(self) -> std::result::Result<Vec<Request>, RequestStream> {
        match self.source {
            Source::Held(it) => Ok(it.collect()),
            source => Err(RequestStream { source, ..self }),
        }
    }
}

impl Iterator for RequestStream {
    type Item = Request;

    fn next(&mut self) -> Option<Request> {
        match &mut self.source {
            Source::Drawn { plan, draw } => draw.next(plan),
            Source::Held(it) => it.next(),
        }
    }
}

/// The random state of a synthetic or shared-prefix workload being drawn.
struct Draw {
    id: u64,
    t: f64,
    arr: ChaCha8Rng,
    pr: ChaCha8Rng,
    out: ChaCha8Rng,
    rr: ChaCha8Rng,
    /// Shared prefix: the prompts the users cycle through.
    cycle: Vec<(Arc<[Segment]>, u32, u32)>,
}

impl Draw {
    fn new(plan: &Plan, seed: u64) -> Draw {
        let cycle = match plan {
            Plan::SharedPrefix {
                requests,
                groups,
                users_per_group,
                system,
                question,
                output,
                ..
            } => shared_prefix_cycle(
                seed,
                *requests,
                *groups,
                *users_per_group,
                [system, question, output],
            ),
            _ => Vec::new(),
        };
        Draw {
            id: 0,
            t: 0.0,
            arr: stream(seed, STREAM_ARRIVALS),
            pr: stream(seed, STREAM_PROMPT),
            out: stream(seed, STREAM_OUTPUT),
            rr: stream(seed, STREAM_ROWS),
            cycle,
        }
    }

    /// The next request of `plan` (the plan this draw was made for).
    fn next(&mut self, plan: &Plan) -> Option<Request> {
        let id = self.id;
        match plan {
            Plan::Synthetic {
                requests,
                gaps,
                prompt,
                output,
                rows,
            } if id < *requests => {
                self.t = gaps.next(self.t, id == 0, &mut self.arr);
                let (p, o) = match rows {
                    Some(rows) => rows[self.rr.random_range(0..rows.len())],
                    None => (prompt.sample(&mut self.pr), output.sample(&mut self.out)),
                };
                self.id += 1;
                Some(Request::new(id, self.t, p, o))
            }
            Plan::SharedPrefix { requests, gaps, .. } if id < *requests => {
                self.t = gaps.next(self.t, id == 0, &mut self.arr);
                let (prefix, p, o) = &self.cycle[(id % self.cycle.len() as u64) as usize];
                self.id += 1;
                Some(Request {
                    prefix: Some(Arc::clone(prefix)),
                    ..Request::new(id, self.t, *p, *o)
                })
            }
            _ => None,
        }
    }
}

/// A conversation plan's requests for `seed`.
fn conversations_of(plan: &Plan, seed: u64) -> Result<Vec<Request>> {
    let Plan::Conversation {
        conversations,
        gaps,
        turns,
        first,
        message,
        output,
        think,
        max_context,
        max_requests,
    } = plan
    else {
        unreachable!("a conversation plan")
    };
    conversations_requests(
        seed,
        *conversations,
        gaps,
        [turns, first, message, output],
        think,
        *max_context,
        *max_requests,
    )
}

/// inference-perf's shared-prefix order (see [`SharedPrefixSpec`]): per-group system prompt
/// lengths, per-user question and output lengths (group-major), one seeded permutation of the
/// users, request `i` from entry `i mod G·U`. Only the `min(N, G·U)` prompts used are built, each
/// chain once and shared by every request of its user.
fn shared_prefix_cycle(
    seed: u64,
    requests: u64,
    groups: u32,
    users_per_group: u32,
    [system, question, output]: [&Lengths; 3],
) -> Vec<(Arc<[Segment]>, u32, u32)> {
    let n = requests as usize;
    let users = groups * users_per_group;
    let mut sr = stream(seed, STREAM_SYSTEM);
    let system_len: Vec<u32> = (0..groups).map(|_| system.sample(&mut sr)).collect();
    let mut qr = stream(seed, STREAM_QUESTION);
    let question_len: Vec<u32> = (0..users).map(|_| question.sample(&mut qr)).collect();
    let mut out = stream(seed, STREAM_OUTPUT);
    let output_len: Vec<u32> = (0..users).map(|_| output.sample(&mut out)).collect();
    // Fisher-Yates on u32 indices (the same draws on every platform).
    let mut order: Vec<u32> = (0..users).collect();
    let mut or = stream(seed, STREAM_ORDER);
    for i in (1..users).rev() {
        let j = or.random_range(0..=i);
        order.swap(i as usize, j as usize);
    }
    // Segment names `shared_prefix.system.{g}` and `shared_prefix.question.{g}.{u}`.
    let system_id: Vec<u64> = (0..groups)
        .map(|g| {
            let name = NameHash::new().text("shared_prefix.system.");
            name.num(u64::from(g)).id()
        })
        .collect();
    let question = NameHash::new().text("shared_prefix.question.");
    order[..n.min(users as usize)]
        .iter()
        .map(|&user| {
            let (g, u) = (user / users_per_group, user % users_per_group);
            let sys = Segment::new(system_id[g as usize], system_len[g as usize]);
            let q = Segment::new(
                question.num(u64::from(g)).text(".").num(u64::from(u)).id(),
                question_len[user as usize],
            );
            // Checked when the workload was built: a system prompt plus a question fits a u32.
            let prompt = sys.len + q.len;
            (Arc::from([sys, q]), prompt, output_len[user as usize])
        })
        .collect()
}

/// Multi-turn conversations (see [`ConversationSpec`]).
fn conversations_requests(
    seed: u64,
    conversations: u64,
    gaps: &Gaps,
    [turns, first, message, output]: [&Lengths; 4],
    think: &Think,
    max_context: u32,
    max_requests: Option<u64>,
) -> Result<Vec<Request>> {
    let mut arr = stream(seed, STREAM_ARRIVALS);
    let mut tr = stream(seed, STREAM_TURNS);
    let mut mr = stream(seed, STREAM_MESSAGES);
    let mut out = stream(seed, STREAM_OUTPUT);
    let mut th = stream(seed, STREAM_THINK);
    // (conversation, turn, request with its index in `all` as id; `follows` by index too).
    let mut all: Vec<(u64, u32, Request)> = Vec::new();
    let mut start = 0.0f64;
    let mut chain: Vec<Segment> = Vec::new();
    let mut drawn: Vec<(u32, u32, f64)> = Vec::new();
    for c in 0..conversations {
        start = gaps.next(start, c == 0, &mut arr);
        let k_max = turns.sample(&mut tr);
        // Every turn's draws first, so `max_context` only truncates.
        drawn.clear();
        for k in 0..k_max {
            let m = if k == 0 { first } else { message }.sample(&mut mr);
            let o = output.sample(&mut out);
            let pause = if k == 0 { 0.0 } else { think.sample(&mut th) };
            drawn.push((m, o, pause));
        }
        // Segment names `conversation.{c}.message.{k}` and `conversation.{c}.answer.{k}`.
        let conv = NameHash::new().text("conversation.").num(c);
        chain.clear();
        let begin = all.len();
        let mut context = 0u64;
        let mut t = start;
        for (k, &(m, o, pause)) in drawn.iter().enumerate() {
            let prompt = context + u64::from(m);
            if k > 0 && prompt + u64::from(o) > u64::from(max_context) {
                break;
            }
            let turn = k as u32 + 1;
            t += pause;
            chain.push(Segment::new(
                conv.text(".message.").num(u64::from(turn)).id(),
                m,
            ));
            let answer = conv.text(".answer.").num(u64::from(turn)).id();
            let index = all.len() as u64;
            all.try_reserve(1).map_err(|_| Error::TooMany {
                count: index + 1,
                bytes: (index + 1) * std::mem::size_of::<(u64, u32, Request)>() as u64,
            })?;
            all.push((
                c,
                turn,
                Request {
                    prefix: Some(Arc::from(chain.as_slice())),
                    output_segment: Some(answer),
                    follows: (k > 0).then(|| Follows {
                        request: index - 1,
                        think_s: pause,
                    }),
                    // The first turn's prompt is one message (a u32); a later turn's prompt plus
                    // its output is at most max_context (a u32).
                    ..Request::new(index, t, prompt as u32, o)
                },
            ));
            chain.push(Segment::new(answer, o));
            context = prompt + u64::from(o);
        }
        // No later prompt contains the last turn's answer.
        if all.len() > begin {
            let last = all.len() - 1;
            all[last].2.output_segment = None;
        }
    }
    all.sort_by(|a, b| {
        (a.2.arrival_s.total_cmp(&b.2.arrival_s))
            .then(a.0.cmp(&b.0))
            .then(a.1.cmp(&b.1))
    });
    let mut new_id = Vec::new();
    new_id
        .try_reserve_exact(all.len())
        .map_err(|_| Error::TooMany {
            count: all.len() as u64,
            bytes: all.len() as u64 * 8,
        })?;
    new_id.resize(all.len(), 0u64);
    for (i, (_, _, r)) in all.iter().enumerate() {
        new_id[r.id as usize] = i as u64;
    }
    let keep = max_requests.map_or(all.len(), |n| all.len().min(n as usize));
    // In place: the requests kept, renumbered, in the vector that held them.
    all.truncate(keep);
    let mut v: Vec<Request> = Vec::new();
    v.try_reserve_exact(keep).map_err(|_| Error::TooMany {
        count: keep as u64,
        bytes: (keep * std::mem::size_of::<Request>()) as u64,
    })?;
    v.extend(all.into_iter().map(|(_, _, mut r)| {
        r.id = new_id[r.id as usize];
        if let Some(f) = &mut r.follows {
            f.request = new_id[f.request as usize];
        }
        r
    }));
    Ok(v)
}

/// Generates the requests of `spec` for `seed`: [`Workload::new`] then [`Workload::generate`],
/// with an error rather than an abort when they do not fit in memory.
pub fn generate(spec: &WorkloadSpec, seed: u64) -> Result<Vec<Request>> {
    let s = stream_requests(spec, seed)?;
    match s.into_held() {
        // The replayed requests as read, not a copy.
        Ok(v) => Ok(v),
        Err(s) => {
            let n = s.len();
            let mut v = Vec::new();
            v.try_reserve_exact(n as usize)
                .map_err(|_| Error::TooMany {
                    count: n,
                    bytes: n * std::mem::size_of::<Request>() as u64,
                })?;
            v.extend(s);
            Ok(v)
        }
    }
}

/// The requests of `spec` for `seed` as a stream drawn while it is consumed: [`Workload::new`]
/// then [`Workload::into_stream`].
pub fn stream_requests(spec: &WorkloadSpec, seed: u64) -> Result<RequestStream> {
    Workload::new(spec)?.into_stream(seed)
}

/// Writes requests as a trace CSV (`arrived_at,num_prefill_tokens,num_decode_tokens`, times in
/// Rust's shortest round-trip decimal form), which [`Trace`] reads back to the same values.
///
/// When some request has a prefix or an output segment, the columns `prefix` and `output_id`
/// follow (ids in their raw `#hex` form); when some request follows another, the columns
/// `follows` (the 0-based row of the request it follows) and `think_s`. Requests with neither
/// are written exactly as before these columns existed. A request that follows one not written
/// before it is an [`io::ErrorKind::InvalidInput`] error.
pub fn write_csv<W: Write>(requests: &[Request], out: W) -> io::Result<()> {
    let segments = requests
        .iter()
        .any(|r| r.prefix.is_some() || r.output_segment.is_some());
    let follows = requests.iter().any(|r| r.follows.is_some());
    let rows: HashMap<u64, usize> = if follows {
        requests
            .iter()
            .enumerate()
            .map(|(i, r)| (r.id, i))
            .collect()
    } else {
        HashMap::new()
    };
    let mut w = io::BufWriter::new(out);
    write!(w, "{TRACE_HEADER}")?;
    if segments {
        write!(w, ",prefix,output_id")?;
    }
    if follows {
        write!(w, ",follows,think_s")?;
    }
    writeln!(w)?;
    for (i, r) in requests.iter().enumerate() {
        write!(w, "{},{},{}", r.arrival_s, r.prompt_tokens, r.output_tokens)?;
        if segments {
            let prefix = r.prefix.as_deref().map(format_prefix).unwrap_or_default();
            let output = r.output_segment.map(format_segment_id).unwrap_or_default();
            write!(w, ",{prefix},{output}")?;
        }
        if follows {
            match r.follows {
                None => write!(w, ",,")?,
                Some(f) => {
                    let row = rows
                        .get(&f.request)
                        .copied()
                        .filter(|&row| row < i)
                        .ok_or_else(|| {
                            io::Error::new(
                                io::ErrorKind::InvalidInput,
                                format!(
                                    "request {} follows request {}, which is not among the requests written before it",
                                    r.id, f.request
                                ),
                            )
                        })?;
                    write!(w, ",{row},{}", f.think_s)?;
                }
            }
        }
        writeln!(w)?;
    }
    w.flush()
}
