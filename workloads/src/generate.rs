//! Turning a checked spec and a seed into requests.

use std::io::{self, Write};

use rand::rngs::ChaCha8Rng;
use rand::{RngExt, SeedableRng};
use rand_distr::{Distribution, Exp, Gamma, LogNormal, Zipf};

use crate::spec::{Arrivals, LengthSpec, SyntheticSpec, WorkloadSpec};
use crate::trace::{TRACE_HEADER, Trace};
use crate::{Error, Request, Result};

/// Random stream numbers: each part of a workload draws from its own stream.
const STREAM_ARRIVALS: u8 = 1;
const STREAM_PROMPT: u8 = 2;
const STREAM_OUTPUT: u8 = 3;
const STREAM_ROWS: u8 = 4;

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
}

/// A prepared workload: spec checked, distributions built and trace files read, ready to
/// generate requests for any seed without further errors.
pub struct Workload {
    plan: Plan,
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
            let trace = Trace::from_path(path)?;
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
                Plan::Replay(Trace::from_path(path)?.replay(options)?)
            }
            WorkloadSpec::Synthetic(s) => Workload::synthetic(s)?,
        };
        Ok(Workload { plan })
    }

    fn synthetic(s: &SyntheticSpec) -> Result<Plan> {
        s.check()?;
        let gaps = match s.arrivals {
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
        };
        let same_trace = match (&s.prompt, &s.output) {
            (LengthSpec::Trace(p), LengthSpec::Trace(o)) if p == o => Some(p),
            _ => None,
        };
        if let Some(p) = same_trace {
            let trace = Trace::from_path(p)?;
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
            Plan::Synthetic {
                requests,
                gaps,
                prompt,
                output,
                rows,
            } => {
                let n = *requests as usize;
                let mut arr = stream(seed, STREAM_ARRIVALS);
                let mut pr = stream(seed, STREAM_PROMPT);
                let mut out = stream(seed, STREAM_OUTPUT);
                let mut rr = stream(seed, STREAM_ROWS);
                let mut t = 0.0f64;
                let mut v = Vec::with_capacity(n);
                for id in 0..n {
                    if id > 0 {
                        t += match gaps {
                            Gaps::Zero => 0.0,
                            Gaps::Exp(d) => d.sample(&mut arr),
                            Gaps::Gamma(d) => d.sample(&mut arr),
                        };
                    }
                    let (p, o) = match rows {
                        Some(rows) => rows[rr.random_range(0..rows.len())],
                        None => (prompt.sample(&mut pr), output.sample(&mut out)),
                    };
                    v.push(Request::new(id as u64, t, p, o));
                }
                v
            }
        }
    }
}

/// Generates the requests of `spec` for `seed`: [`Workload::new`] then [`Workload::generate`].
pub fn generate(spec: &WorkloadSpec, seed: u64) -> Result<Vec<Request>> {
    Ok(match Workload::new(spec)? {
        // The replayed requests as read, not a copy.
        Workload {
            plan: Plan::Replay(r),
        } => r,
        w => w.generate(seed),
    })
}

/// Writes requests as a trace CSV (`arrived_at,num_prefill_tokens,num_decode_tokens`, times in
/// Rust's shortest round-trip decimal form), which [`Trace`] reads back to the same values.
pub fn write_csv<W: Write>(requests: &[Request], out: W) -> io::Result<()> {
    let mut w = io::BufWriter::new(out);
    writeln!(w, "{TRACE_HEADER}")?;
    for r in requests {
        writeln!(w, "{},{},{}", r.arrival_s, r.prompt_tokens, r.output_tokens)?;
    }
    w.flush()
}
