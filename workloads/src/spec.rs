//! Workload specs: the raw serde/CLI form, the spec-string grammar and the checked form.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::trace::{ReplayOptions, TimeScale};
use crate::{Error, Result};

/// The seed used when none is given.
pub const DEFAULT_SEED: u64 = 0;
/// Zipf exponent used when `zipf:LO:HI` gives none.
pub const DEFAULT_ZIPF_THETA: f64 = 1.0;
/// Largest length `lognormal:MEDIAN:SIGMA` produces when no MAX is given (2^20 tokens).
pub const DEFAULT_LOGNORMAL_MAX: u32 = 1 << 20;
/// Most requests one synthetic workload may hold (10^8, about 2.4 GB of requests).
pub const MAX_REQUESTS: u64 = 100_000_000;
/// Largest accepted coefficient of variation for Gamma arrivals.
pub const MAX_CV: f64 = 100.0;

const ARRIVAL_FORMS: &str =
    "`all-at-once`, `poisson`, `gamma:CV` or `gamma` with `cv` (CV > 0; 1 is Poisson)";
const LENGTH_FORMS: &str = "`N` or `fixed:N`, `uniform:LO:HI`, `zipf:LO:HI[:THETA]`, \
     `lognormal:MEDIAN:SIGMA[:MAX]`, `trace:FILE` (token counts are whole numbers 1..=4294967295)";
const TOKENS: &str = "a whole number of tokens from 1 to 4294967295";

/// The kind of arrival process, as written in a spec string (rates are given beside it).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ArrivalKind {
    /// `all-at-once`: every request at t = 0.
    AllAtOnce,
    /// `poisson`: exponential inter-arrival times.
    Poisson,
    /// `gamma` or `gamma:CV`: Gamma inter-arrival times; the CV may instead come from a `cv` field.
    Gamma {
        /// The CV written in the string, if any.
        cv: Option<f64>,
    },
}

impl ArrivalKind {
    /// Parses an arrival spec string; `field` names it in errors.
    pub fn parse(field: &'static str, s: &str) -> Result<Self> {
        let bad = || Error::BadSpec {
            field,
            got: s.to_string(),
            expected: ARRIVAL_FORMS,
        };
        let t = s.trim();
        match t.to_ascii_lowercase().as_str() {
            "all-at-once" | "all_at_once" | "batch" => return Ok(ArrivalKind::AllAtOnce),
            "poisson" => return Ok(ArrivalKind::Poisson),
            "gamma" => return Ok(ArrivalKind::Gamma { cv: None }),
            _ => {}
        }
        let Some((head, cv)) = t.split_once(':') else {
            return Err(bad());
        };
        if !head.eq_ignore_ascii_case("gamma") {
            return Err(bad());
        }
        let cv = parse_f64("cv", cv, cv_range())?;
        check_cv(cv)?;
        Ok(ArrivalKind::Gamma { cv: Some(cv) })
    }
}

impl FromStr for ArrivalKind {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        ArrivalKind::parse("arrivals", s)
    }
}

/// A checked arrival process.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Arrivals {
    /// Every request at t = 0.
    AllAtOnce,
    /// A Poisson process: exponential inter-arrival times with mean `1/qps`.
    Poisson {
        /// Mean requests per second.
        qps: f64,
    },
    /// A renewal process with Gamma inter-arrival times: mean `1/qps`, coefficient of variation
    /// `cv` (shape `1/cv²`). `cv = 1` is Poisson; larger is burstier.
    Gamma {
        /// Mean requests per second.
        qps: f64,
        /// Coefficient of variation of the inter-arrival times.
        cv: f64,
    },
}

impl Arrivals {
    /// Combines a parsed kind with the `qps` and `cv` given beside it, checking that each is
    /// given exactly where it is used and lies in range.
    pub fn new(kind: ArrivalKind, qps: Option<f64>, cv: Option<f64>) -> Result<Self> {
        let arrivals = match kind {
            ArrivalKind::AllAtOnce => {
                if let Some(q) = qps {
                    return Err(Error::Conflict {
                        field: "qps",
                        why: format!("not used with all-at-once arrivals (got {q})"),
                    });
                }
                if let Some(c) = cv {
                    return Err(cv_unused(c));
                }
                Arrivals::AllAtOnce
            }
            ArrivalKind::Poisson => {
                if let Some(c) = cv {
                    return Err(cv_unused(c));
                }
                Arrivals::Poisson {
                    qps: qps.ok_or(QPS_MISSING)?,
                }
            }
            ArrivalKind::Gamma { cv: in_spec } => {
                let cv = match (in_spec, cv) {
                    (Some(a), Some(b)) if a != b => {
                        return Err(Error::Conflict {
                            field: "cv",
                            why: format!("{b} contradicts the `gamma:{a}` arrivals"),
                        });
                    }
                    (Some(a), _) | (None, Some(a)) => a,
                    (None, None) => {
                        return Err(Error::Missing {
                            field: "cv",
                            why: "gamma arrivals need a coefficient of variation: `gamma:CV` or a `cv` field, CV > 0",
                        });
                    }
                };
                Arrivals::Gamma {
                    qps: qps.ok_or(QPS_MISSING)?,
                    cv,
                }
            }
        };
        arrivals.check()?;
        Ok(arrivals)
    }

    /// Checks the rates (`qps` finite and > 0, `cv` in (0, [`MAX_CV`]]).
    pub fn check(&self) -> Result<()> {
        match *self {
            Arrivals::AllAtOnce => Ok(()),
            Arrivals::Poisson { qps } => check_qps(qps),
            Arrivals::Gamma { qps, cv } => {
                check_qps(qps)?;
                check_cv(cv)
            }
        }
    }
}

const QPS_MISSING: Error = Error::Missing {
    field: "qps",
    why: "poisson and gamma arrivals need a mean rate in requests per second, > 0",
};

fn cv_unused(c: f64) -> Error {
    Error::Conflict {
        field: "cv",
        why: format!("only used with gamma arrivals (got {c})"),
    }
}

fn cv_range() -> String {
    format!("a number > 0 and at most {MAX_CV}")
}

pub(crate) fn check_qps(qps: f64) -> Result<()> {
    if qps.is_finite() && qps > 0.0 {
        Ok(())
    } else {
        Err(Error::OutOfRange {
            field: "qps",
            got: qps.to_string(),
            expected: "a finite number of requests per second > 0".into(),
        })
    }
}

fn check_cv(cv: f64) -> Result<()> {
    if cv > 0.0 && cv <= MAX_CV {
        Ok(())
    } else {
        Err(Error::OutOfRange {
            field: "cv",
            got: cv.to_string(),
            expected: cv_range(),
        })
    }
}

fn parse_f64(field: &'static str, s: &str, expected: String) -> Result<f64> {
    s.trim().parse::<f64>().map_err(|_| Error::OutOfRange {
        field,
        got: s.to_string(),
        expected,
    })
}

fn parse_tokens(field: &'static str, s: &str) -> Result<u32> {
    let v = s.trim().parse::<u32>().map_err(|_| Error::OutOfRange {
        field,
        got: s.to_string(),
        expected: TOKENS.into(),
    })?;
    if v == 0 {
        return Err(Error::OutOfRange {
            field,
            got: s.to_string(),
            expected: TOKENS.into(),
        });
    }
    Ok(v)
}

/// A length distribution (for prompts or outputs), in tokens.
#[derive(Debug, Clone, PartialEq)]
pub enum LengthSpec {
    /// `N` or `fixed:N`.
    Fixed(u32),
    /// `uniform:LO:HI`: uniform over the integers `lo..=hi`.
    Uniform {
        /// Smallest length.
        lo: u32,
        /// Largest length.
        hi: u32,
    },
    /// `zipf:LO:HI[:THETA]`: Zipf over the integers `lo..=hi`, the value `lo + r - 1` having
    /// probability ∝ `r^-theta` (so `lo` is the most frequent). `theta` defaults to
    /// [`DEFAULT_ZIPF_THETA`]; 0 is uniform.
    Zipf {
        /// Smallest (and most frequent) length.
        lo: u32,
        /// Largest length.
        hi: u32,
        /// Exponent, ≥ 0.
        theta: f64,
    },
    /// `lognormal:MEDIAN:SIGMA[:MAX]`: `exp(N(ln median, sigma²))`, rounded to the nearest
    /// integer and clamped to `1..=max` ([`DEFAULT_LOGNORMAL_MAX`] when not given).
    LogNormal {
        /// Median length, > 0.
        median: f64,
        /// Standard deviation of the length's logarithm, ≥ 0.
        sigma: f64,
        /// Largest length produced.
        max: u32,
    },
    /// `trace:FILE`: resampled from a trace CSV's empirical distribution.
    Trace(PathBuf),
}

impl LengthSpec {
    /// Parses a length spec string; `field` (`prompt_lengths`, `output_lengths`) names it in
    /// errors.
    pub fn parse(field: &'static str, s: &str) -> Result<Self> {
        let bad = || Error::BadSpec {
            field,
            got: s.to_string(),
            expected: LENGTH_FORMS,
        };
        let t = s.trim();
        if t.is_empty() {
            return Err(bad());
        }
        let (head, rest) = t.split_once(':').unwrap_or((t, ""));
        let head_l = head.to_ascii_lowercase();
        if head_l == "trace" {
            if rest.trim().is_empty() {
                return Err(bad());
            }
            return Ok(LengthSpec::Trace(PathBuf::from(rest.trim())));
        }
        let args: Vec<&str> = if rest.is_empty() && !t.contains(':') {
            Vec::new()
        } else {
            rest.split(':').collect()
        };
        let spec = match (head_l.as_str(), args.as_slice()) {
            (_, []) if head.trim().bytes().all(|b| b.is_ascii_digit() || b == b'-') => {
                LengthSpec::Fixed(parse_tokens(field, head)?)
            }
            ("fixed", [n]) => LengthSpec::Fixed(parse_tokens(field, n)?),
            ("uniform", [lo, hi]) => LengthSpec::Uniform {
                lo: parse_tokens(field, lo)?,
                hi: parse_tokens(field, hi)?,
            },
            ("zipf", [lo, hi]) => LengthSpec::Zipf {
                lo: parse_tokens(field, lo)?,
                hi: parse_tokens(field, hi)?,
                theta: DEFAULT_ZIPF_THETA,
            },
            ("zipf", [lo, hi, theta]) => LengthSpec::Zipf {
                lo: parse_tokens(field, lo)?,
                hi: parse_tokens(field, hi)?,
                theta: parse_f64(field, theta, THETA.into())?,
            },
            ("lognormal", [median, sigma]) => LengthSpec::LogNormal {
                median: parse_f64(field, median, MEDIAN.into())?,
                sigma: parse_f64(field, sigma, SIGMA.into())?,
                max: DEFAULT_LOGNORMAL_MAX,
            },
            ("lognormal", [median, sigma, max]) => LengthSpec::LogNormal {
                median: parse_f64(field, median, MEDIAN.into())?,
                sigma: parse_f64(field, sigma, SIGMA.into())?,
                max: parse_tokens(field, max)?,
            },
            _ => return Err(bad()),
        };
        spec.check(field)?;
        Ok(spec)
    }

    /// Checks the parameters; `field` names the spec in errors.
    pub fn check(&self, field: &'static str) -> Result<()> {
        let range = |got: String, expected: String| {
            Err(Error::OutOfRange {
                field,
                got,
                expected,
            })
        };
        match self {
            LengthSpec::Fixed(0) => range("0".into(), TOKENS.into()),
            LengthSpec::Fixed(_) => Ok(()),
            LengthSpec::Uniform { lo, hi } | LengthSpec::Zipf { lo, hi, .. } => {
                if *lo == 0 {
                    return range("LO = 0".into(), TOKENS.into());
                }
                if lo > hi {
                    return range(
                        format!("LO = {lo} > HI = {hi}"),
                        "LO ≤ HI (`uniform:LO:HI`, `zipf:LO:HI[:THETA]`)".into(),
                    );
                }
                match self {
                    LengthSpec::Zipf { theta, .. } if !(theta.is_finite() && *theta >= 0.0) => {
                        range(format!("THETA = {theta}"), THETA.into())
                    }
                    _ => Ok(()),
                }
            }
            LengthSpec::LogNormal { median, sigma, max } => {
                if !(median.is_finite() && *median > 0.0) {
                    return range(format!("MEDIAN = {median}"), MEDIAN.into());
                }
                if !(sigma.is_finite() && *sigma >= 0.0) {
                    return range(format!("SIGMA = {sigma}"), SIGMA.into());
                }
                if *max == 0 {
                    return range("MAX = 0".into(), TOKENS.into());
                }
                Ok(())
            }
            LengthSpec::Trace(p) if p.as_os_str().is_empty() => Err(Error::BadSpec {
                field,
                got: "trace:".into(),
                expected: LENGTH_FORMS,
            }),
            LengthSpec::Trace(_) => Ok(()),
        }
    }
}

const THETA: &str = "a Zipf exponent THETA ≥ 0 (finite; 0 is uniform, default 1.0)";
const MEDIAN: &str = "a median length MEDIAN > 0 (finite)";
const SIGMA: &str = "a log-space standard deviation SIGMA ≥ 0 (finite)";

impl FromStr for LengthSpec {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        LengthSpec::parse("lengths", s)
    }
}

/// Writes the canonical spec string, which [`LengthSpec::parse`] reads back to the same value.
impl fmt::Display for LengthSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LengthSpec::Fixed(n) => write!(f, "fixed:{n}"),
            LengthSpec::Uniform { lo, hi } => write!(f, "uniform:{lo}:{hi}"),
            LengthSpec::Zipf { lo, hi, theta } => write!(f, "zipf:{lo}:{hi}:{theta}"),
            LengthSpec::LogNormal { median, sigma, max } => {
                write!(f, "lognormal:{median}:{sigma}:{max}")
            }
            LengthSpec::Trace(p) => write!(f, "trace:{}", p.display()),
        }
    }
}

/// A checked synthetic workload: an arrival process and two length distributions.
#[derive(Debug, Clone, PartialEq)]
pub struct SyntheticSpec {
    /// How requests arrive.
    pub arrivals: Arrivals,
    /// Prompt lengths.
    pub prompt: LengthSpec,
    /// Output lengths.
    pub output: LengthSpec,
    /// How many requests (1..=[`MAX_REQUESTS`]).
    pub requests: u64,
}

impl SyntheticSpec {
    /// Checks every part.
    pub fn check(&self) -> Result<()> {
        self.arrivals.check()?;
        self.prompt.check("prompt_lengths")?;
        self.output.check("output_lengths")?;
        check_requests(self.requests)
    }
}

pub(crate) fn check_requests(n: u64) -> Result<()> {
    if (1..=MAX_REQUESTS).contains(&n) {
        Ok(())
    } else {
        Err(Error::OutOfRange {
            field: "requests",
            got: n.to_string(),
            expected: format!("a number of requests from 1 to {MAX_REQUESTS}"),
        })
    }
}

/// A checked workload.
#[derive(Debug, Clone, PartialEq)]
pub enum WorkloadSpec {
    /// Generated from distributions with a seed.
    Synthetic(SyntheticSpec),
    /// Replayed from a trace file (the seed is not used).
    Replay {
        /// The trace CSV.
        path: PathBuf,
        /// Time scaling, request cap and start offset.
        options: ReplayOptions,
    },
}

/// The raw workload description, as a TOML `[workload]` table or CLI flags hold it. Every field
/// is optional here; [`WorkloadConfig::validate`] says which are needed.
///
/// Synthetic: `arrivals`, `qps` (not for `all-at-once`), `cv` (only for `gamma`),
/// `prompt_lengths`, `output_lengths`, `requests`, `seed` (default [`DEFAULT_SEED`]).
/// Replay: `trace` with optional `requests` (cap), `qps` (rate scaling) or `time_scale`, and
/// `start_s`.
///
/// ```toml
/// [workload]
/// arrivals = "gamma:2"
/// qps = 8.0
/// prompt_lengths = "zipf:512:2048"
/// output_lengths = "lognormal:128:0.8"
/// requests = 10000
/// seed = 7
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadConfig {
    /// Arrival process: `all-at-once`, `poisson`, `gamma:CV` or `gamma`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arrivals: Option<String>,
    /// Mean requests per second (synthetic), or the target rate a trace is scaled to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qps: Option<f64>,
    /// Coefficient of variation of Gamma inter-arrival times.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cv: Option<f64>,
    /// Prompt length spec (see the crate docs for the grammar).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_lengths: Option<String>,
    /// Output length spec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_lengths: Option<String>,
    /// Number of requests (synthetic), or a cap on the requests replayed from a trace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests: Option<u64>,
    /// Seed of the random streams.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// A trace CSV to replay instead of generating.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<PathBuf>,
    /// Replay only: multiply every inter-arrival time by this factor (> 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_scale: Option<f64>,
    /// Replay only: start at this trace time in seconds (≥ 0); it becomes t = 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_s: Option<f64>,
}

impl WorkloadConfig {
    /// The seed, or [`DEFAULT_SEED`].
    pub fn seed(&self) -> u64 {
        self.seed.unwrap_or(DEFAULT_SEED)
    }

    /// Checks the fields and derives the typed spec.
    pub fn validate(&self) -> Result<WorkloadSpec> {
        if let Some(path) = &self.trace {
            for (field, given) in [
                ("arrivals", self.arrivals.is_some()),
                ("cv", self.cv.is_some()),
                ("prompt_lengths", self.prompt_lengths.is_some()),
                ("output_lengths", self.output_lengths.is_some()),
            ] {
                if given {
                    return Err(Error::Conflict {
                        field,
                        why: "not used when replaying a trace (`trace` takes arrivals and lengths from the file)".into(),
                    });
                }
            }
            let scale = match (self.qps, self.time_scale) {
                (Some(_), Some(_)) => {
                    return Err(Error::Conflict {
                        field: "time_scale",
                        why: "give either `time_scale` (a factor on inter-arrival times) or `qps` (a target rate), not both".into(),
                    });
                }
                (Some(q), None) => TimeScale::TargetQps(q),
                (None, Some(f)) => TimeScale::Factor(f),
                (None, None) => TimeScale::Original,
            };
            let options = ReplayOptions {
                scale,
                max_requests: self.requests,
                start_s: self.start_s.unwrap_or(0.0),
            };
            options.check()?;
            if path.as_os_str().is_empty() {
                return Err(Error::Missing {
                    field: "trace",
                    why: "a path to a CSV with header `arrived_at,num_prefill_tokens,num_decode_tokens`",
                });
            }
            return Ok(WorkloadSpec::Replay {
                path: path.clone(),
                options,
            });
        }
        for (field, given) in [
            ("time_scale", self.time_scale.is_some()),
            ("start_s", self.start_s.is_some()),
        ] {
            if given {
                return Err(Error::Conflict {
                    field,
                    why: "only used when replaying a trace (`trace`)".into(),
                });
            }
        }
        let arrivals = self.arrivals.as_deref().ok_or(Error::Missing {
            field: "arrivals",
            why: ARRIVAL_FORMS,
        })?;
        let kind = ArrivalKind::parse("arrivals", arrivals)?;
        let arrivals = Arrivals::new(kind, self.qps, self.cv)?;
        let prompt = LengthSpec::parse(
            "prompt_lengths",
            self.prompt_lengths.as_deref().ok_or(Error::Missing {
                field: "prompt_lengths",
                why: LENGTH_FORMS,
            })?,
        )?;
        let output = LengthSpec::parse(
            "output_lengths",
            self.output_lengths.as_deref().ok_or(Error::Missing {
                field: "output_lengths",
                why: LENGTH_FORMS,
            })?,
        )?;
        let requests = self.requests.ok_or(Error::Missing {
            field: "requests",
            why: "the number of requests to generate, ≥ 1",
        })?;
        check_requests(requests)?;
        Ok(WorkloadSpec::Synthetic(SyntheticSpec {
            arrivals,
            prompt,
            output,
            requests,
        }))
    }
}
