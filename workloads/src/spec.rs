//! Workload specs: the raw serde/CLI form, the spec-string grammar and the checked form.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
pub use crate::limits::MAX_REQUESTS;
use crate::limits::{MAX_ARRIVAL_S, check_arrival_span, check_qps, check_requests};
use crate::trace::{ReplayOptions, TimeScale};

/// The seed used when none is given.
pub const DEFAULT_SEED: u64 = 0;
/// Zipf exponent used when `zipf:LO:HI` gives none.
pub const DEFAULT_ZIPF_THETA: f64 = 1.0;
/// Largest length `lognormal:MEDIAN:SIGMA` produces when no MAX is given (2^20 tokens).
pub const DEFAULT_LOGNORMAL_MAX: u32 = 1 << 20;
/// Most turns one conversation may have (turn `k`'s prefix holds `2k - 1` segments, so a
/// conversation's chains hold about `turns²` segments).
pub const MAX_TURNS: u32 = 1000;

/// Longest think time (its value, mean or largest) a conversation may give, seconds:
/// [`MAX_ARRIVAL_S`] over [`MAX_TURNS`], 49.7 days.
pub const MAX_THINK_S: f64 = MAX_ARRIVAL_S / MAX_TURNS as f64;

/// Largest accepted coefficient of variation for Gamma arrivals.
pub const MAX_CV: f64 = 100.0;

const ARRIVAL_FORMS: &str = "`all-at-once`, `poisson`, `gamma:CV` or `gamma` with `cv` (CV > 0; 1 is \
     Poisson), `diurnal:PEAK:TROUGH:PERIOD` (req/s, PEAK ≥ TROUGH > 0, PERIOD with a unit: 24h, \
     30m, 86400s)";
const DIURNAL_FORM: &str = "`diurnal:PEAK:TROUGH:PERIOD`: rates in requests per second with PEAK ≥ \
     TROUGH > 0, and PERIOD > 0 with a unit (s, m, h or d: 24h, 30m, 86400s)";
const LENGTH_FORMS: &str = "`N` or `fixed:N`, `uniform:LO:HI`, `zipf:LO:HI[:THETA]`, \
     `lognormal:MEDIAN:SIGMA[:MAX]`, `trace:FILE` (token counts are whole numbers 1..=4294967295)";
const TOKENS: &str = "a whole number of tokens from 1 to 4294967295";
const TURNS: &str = "a whole number of turns from 1 to 4294967295";
const THINK_FORMS: &str = "`S` or `fixed:S` (seconds ≥ 0), `exp:MEAN` (exponential, MEAN > 0), \
     `uniform:LO:HI` (0 ≤ LO ≤ HI), all finite";

/// What a length spec counts, for its errors: turns for `conversation.turns`, else tokens.
fn counted(field: &str) -> &'static str {
    if field.ends_with("turns") {
        TURNS
    } else {
        TOKENS
    }
}

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
    /// `diurnal:PEAK:TROUGH:PERIOD`: a daily shape (see [`Arrivals::Diurnal`]).
    Diurnal {
        /// Highest rate, requests per second.
        peak: f64,
        /// Lowest rate, requests per second.
        trough: f64,
        /// Seconds of one cycle.
        period_s: f64,
    },
}

/// `24h`, `30m`, `86400s`, `1d` (a bare number: seconds) in seconds.
fn parse_period(s: &str) -> Option<f64> {
    let t = s.trim();
    let (n, scale) = if let Some(n) = t.strip_suffix('d') {
        (n, 86_400.0)
    } else if let Some(n) = t.strip_suffix('h') {
        (n, 3600.0)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 60.0)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else {
        (t, 1.0)
    };
    n.trim().parse::<f64>().ok().map(|v| v * scale)
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
        if head.eq_ignore_ascii_case("diurnal") {
            let parts: Vec<&str> = cv.split(':').collect();
            let [peak, trough, period] = parts.as_slice() else {
                return Err(Error::BadSpec {
                    field,
                    got: s.to_string(),
                    expected: DIURNAL_FORM,
                });
            };
            let range = |got: &str| Error::OutOfRange {
                field,
                got: got.to_string(),
                expected: DIURNAL_FORM.into(),
            };
            let peak: f64 = peak.trim().parse().map_err(|_| range(s))?;
            let trough: f64 = trough.trim().parse().map_err(|_| range(s))?;
            let period_s = parse_period(period).ok_or_else(|| range(s))?;
            let a = Arrivals::Diurnal {
                peak,
                trough,
                period_s,
            };
            a.check_diurnal(field)?;
            return Ok(ArrivalKind::Diurnal {
                peak,
                trough,
                period_s,
            });
        }
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
    /// A non-homogeneous Poisson process with a daily shape: the rate at time `t` is
    /// `(peak + trough)/2 - (peak - trough)/2 · cos(2πt / period_s)`, so the trough is at `t = 0`
    /// (and every `period_s` after), the peak at `period_s / 2`. Sampled exactly by thinning
    /// (Lewis and Shedler 1979): candidates of a Poisson process at `peak`, each kept with
    /// probability `rate(t) / peak`, from the seeded arrival stream. The first request arrives at
    /// `t = 0`, as with the other processes.
    Diurnal {
        /// Highest rate, requests per second.
        peak: f64,
        /// Lowest rate, requests per second.
        trough: f64,
        /// Seconds of one cycle.
        period_s: f64,
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
            ArrivalKind::Diurnal {
                peak,
                trough,
                period_s,
            } => {
                if let Some(q) = qps {
                    return Err(Error::Conflict {
                        field: "qps",
                        why: format!(
                            "not used with diurnal arrivals, whose rates are in the spec \
                             (`diurnal:PEAK:TROUGH:PERIOD`; got {q})"
                        ),
                    });
                }
                if let Some(c) = cv {
                    return Err(cv_unused(c));
                }
                Arrivals::Diurnal {
                    peak,
                    trough,
                    period_s,
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
            Arrivals::Diurnal { .. } => self.check_diurnal("arrivals"),
        }
    }

    /// Checks a diurnal shape: PEAK ≥ TROUGH > 0, both finite, PERIOD > 0 and at most
    /// [`MAX_ARRIVAL_S`]; `field` names it in errors.
    fn check_diurnal(&self, field: &'static str) -> Result<()> {
        let Arrivals::Diurnal {
            peak,
            trough,
            period_s,
        } = *self
        else {
            return Ok(());
        };
        let range = |got: String| {
            Err(Error::OutOfRange {
                field,
                got,
                expected: DIURNAL_FORM.into(),
            })
        };
        if !(trough.is_finite() && trough > 0.0) {
            return range(format!("TROUGH = {trough}"));
        }
        if !(peak.is_finite() && peak >= trough) {
            return range(format!("PEAK = {peak} < TROUGH = {trough}"));
        }
        if !(period_s.is_finite() && period_s > 0.0 && period_s <= MAX_ARRIVAL_S) {
            return range(format!("PERIOD = {period_s} s"));
        }
        Ok(())
    }

    /// The mean rate, requests per second (`None`: all at once).
    pub fn mean_qps(&self) -> Option<f64> {
        match *self {
            Arrivals::AllAtOnce => None,
            Arrivals::Poisson { qps } | Arrivals::Gamma { qps, .. } => Some(qps),
            Arrivals::Diurnal { peak, trough, .. } => Some((peak + trough) / 2.0),
        }
    }

    /// The requests of one period of diurnal arrivals, `(PEAK + TROUGH)/2 × PERIOD` rounded (at
    /// least 1): the count a workload gets when it gives none. `None` for the other processes.
    pub fn default_requests(&self) -> Option<u64> {
        match *self {
            Arrivals::Diurnal {
                peak,
                trough,
                period_s,
            } => Some((((peak + trough) / 2.0 * period_s).round() as u64).max(1)),
            _ => None,
        }
    }

    /// Checks that `count` arrivals (`what`: `requests`, `conversations`) at this (checked) rate
    /// come within [`MAX_ARRIVAL_S`] on average.
    pub fn check_span(&self, count: u64, what: &str) -> Result<()> {
        match *self {
            Arrivals::AllAtOnce => Ok(()),
            Arrivals::Poisson { qps } | Arrivals::Gamma { qps, .. } => {
                check_arrival_span(qps, count, what)
            }
            Arrivals::Diurnal { peak, trough, .. } => {
                check_arrival_span((peak + trough) / 2.0, count, what)
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
        expected: counted(field).into(),
    })?;
    if v == 0 {
        return Err(Error::OutOfRange {
            field,
            got: s.to_string(),
            expected: counted(field).into(),
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
            LengthSpec::Fixed(0) => range("0".into(), counted(field).into()),
            LengthSpec::Fixed(_) => Ok(()),
            LengthSpec::Uniform { lo, hi } | LengthSpec::Zipf { lo, hi, .. } => {
                if *lo == 0 {
                    return range("LO = 0".into(), counted(field).into());
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
                    return range("MAX = 0".into(), counted(field).into());
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

impl LengthSpec {
    /// The largest length the spec can produce, or `None` for `trace:FILE` (known once the file
    /// is read).
    pub fn upper_bound(&self) -> Option<u32> {
        match self {
            LengthSpec::Fixed(n) => Some(*n),
            LengthSpec::Uniform { hi, .. } | LengthSpec::Zipf { hi, .. } => Some(*hi),
            LengthSpec::LogNormal { max, .. } => Some(*max),
            LengthSpec::Trace(_) => None,
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
        check_requests(self.requests)?;
        self.arrivals.check_span(self.requests, "requests")
    }
}

/// A think-time distribution, in seconds: the pause between one turn of a conversation
/// finishing and the user sending the next.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ThinkTime {
    /// `S` or `fixed:S`: always S seconds (≥ 0).
    Fixed(f64),
    /// `exp:MEAN` (or `exponential:MEAN`): exponential with that mean (> 0).
    Exponential {
        /// Mean seconds.
        mean: f64,
    },
    /// `uniform:LO:HI`: uniform over `[lo, hi]` seconds.
    Uniform {
        /// Shortest pause.
        lo: f64,
        /// Longest pause.
        hi: f64,
    },
}

impl ThinkTime {
    /// Parses a think-time spec string; `field` names it in errors.
    pub fn parse(field: &'static str, s: &str) -> Result<Self> {
        let bad = || Error::BadSpec {
            field,
            got: s.to_string(),
            expected: THINK_FORMS,
        };
        let t = s.trim();
        let (head, rest) = t.split_once(':').unwrap_or((t, ""));
        let args: Vec<&str> = if t.contains(':') {
            rest.split(':').collect()
        } else {
            Vec::new()
        };
        let secs = |v: &str| parse_f64(field, v, THINK_FORMS.into());
        let think = match (head.to_ascii_lowercase().as_str(), args.as_slice()) {
            ("fixed", [v]) => ThinkTime::Fixed(secs(v)?),
            ("exp" | "exponential", [m]) => ThinkTime::Exponential { mean: secs(m)? },
            ("uniform", [lo, hi]) => ThinkTime::Uniform {
                lo: secs(lo)?,
                hi: secs(hi)?,
            },
            (_, []) if head.trim().parse::<f64>().is_ok() => ThinkTime::Fixed(secs(head)?),
            _ => return Err(bad()),
        };
        think.check(field)?;
        Ok(think)
    }

    /// Checks the parameters (finite; fixed and LO ≥ 0, LO ≤ HI, MEAN > 0); `field` names the
    /// spec in errors.
    pub fn check(&self, field: &'static str) -> Result<()> {
        let ok = match *self {
            ThinkTime::Fixed(v) => v.is_finite() && v >= 0.0,
            ThinkTime::Exponential { mean } => mean.is_finite() && mean > 0.0,
            ThinkTime::Uniform { lo, hi } => {
                lo.is_finite() && hi.is_finite() && 0.0 <= lo && lo <= hi
            }
        };
        if !ok {
            return Err(Error::OutOfRange {
                field,
                got: self.to_string(),
                expected: THINK_FORMS.into(),
            });
        }
        // The most turns of thinking, each at its mean or largest, within the simulated clock.
        let longest = match *self {
            ThinkTime::Fixed(v) => v,
            ThinkTime::Exponential { mean } => mean,
            ThinkTime::Uniform { hi, .. } => hi,
        };
        if longest > MAX_THINK_S {
            return Err(Error::OutOfRange {
                field,
                got: self.to_string(),
                expected: format!(
                    "think times of at most {MAX_THINK_S} s, so that {MAX_TURNS} turns of them stay within {MAX_ARRIVAL_S} s of simulated time"
                ),
            });
        }
        Ok(())
    }
}

/// Writes the canonical spec string, which [`ThinkTime::parse`] reads back to the same value.
impl fmt::Display for ThinkTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ThinkTime::Fixed(v) => write!(f, "fixed:{v}"),
            ThinkTime::Exponential { mean } => write!(f, "exp:{mean}"),
            ThinkTime::Uniform { lo, hi } => write!(f, "uniform:{lo}:{hi}"),
        }
    }
}

/// A checked shared-prefix workload, after inference-perf's shared-prefix data generator
/// (`kubernetes-sigs/inference-perf`, `inference_perf/datagen/synthetic/shared_prefix_datagen.py`,
/// earlier `inference_perf/datagen/shared_prefix_datagen.py`).
///
/// `groups` system prompts, `users_per_group` users per group. Group `g`'s system prompt length
/// is drawn once per group, user `(g, u)`'s question length and output length once per user, so
/// a user's whole prompt repeats: its prefix is `[system_g, question_{g,u}]`, covering the
/// prompt. As in inference-perf, the `G·U` prompts are listed group-major (`g·U + u`), shuffled
/// once by a seeded permutation, and request `i` takes entry `i mod G·U`: every window of `G·U`
/// consecutive requests holds every user once, and request `i + G·U` repeats request `i`'s
/// prompt. inference-perf's shuffle (numpy's `permutation`, or Python's `random.shuffle` before
/// it was seeded) is not reproduced draw for draw; the order's structure is.
#[derive(Debug, Clone, PartialEq)]
pub struct SharedPrefixSpec {
    /// How requests arrive.
    pub arrivals: Arrivals,
    /// System prompts (≥ 1).
    pub groups: u32,
    /// Users per system prompt (≥ 1); `groups × users_per_group` ≤ [`MAX_REQUESTS`].
    pub users_per_group: u32,
    /// System prompt length, drawn once per group.
    pub system_prompt: LengthSpec,
    /// Question length, drawn once per user.
    pub question: LengthSpec,
    /// Output length, drawn once per user (inference-perf's `output_len` per prompt).
    pub output: LengthSpec,
    /// How many requests (1..=[`MAX_REQUESTS`]).
    pub requests: u64,
}

impl SharedPrefixSpec {
    /// Checks every part, including that a system prompt plus a question fits in 4294967295
    /// tokens (for `trace:FILE` lengths, once the file is read).
    pub fn check(&self) -> Result<()> {
        self.arrivals.check()?;
        for (field, v) in [
            ("shared_prefix.groups", self.groups),
            ("shared_prefix.users_per_group", self.users_per_group),
        ] {
            if v == 0 {
                return Err(Error::NonPositive { field, value: 0 });
            }
        }
        let users = u64::from(self.groups) * u64::from(self.users_per_group);
        if users > MAX_REQUESTS {
            return Err(Error::OutOfRange {
                field: "shared_prefix.users_per_group",
                got: format!(
                    "groups × users_per_group = {} × {} = {users}",
                    self.groups, self.users_per_group
                ),
                expected: format!("at most {MAX_REQUESTS} users in all"),
            });
        }
        self.system_prompt
            .check("shared_prefix.system_prompt_len")?;
        self.question.check("shared_prefix.question_len")?;
        self.output.check("output_lengths")?;
        if let (Some(s), Some(q)) = (
            self.system_prompt.upper_bound(),
            self.question.upper_bound(),
        ) {
            check_prompt_fits(s, q)?;
        }
        check_requests(self.requests)?;
        self.arrivals.check_span(self.requests, "requests")
    }
}

pub(crate) fn check_prompt_fits(system_max: u32, question_max: u32) -> Result<()> {
    if system_max.checked_add(question_max).is_some() {
        Ok(())
    } else {
        Err(Error::OutOfRange {
            field: "shared_prefix.question_len",
            got: format!(
                "a system prompt of up to {system_max} tokens plus a question of up to {question_max}"
            ),
            expected: "prompts of at most 4294967295 tokens: lower the largest system_prompt_len or question_len".into(),
        })
    }
}

/// A checked multi-turn conversation workload.
///
/// Conversations start by the arrival process (`qps` is conversations per second). Conversation
/// `c` has `turns` turns; turn 1's prompt is the first message, turn `k`'s prompt is every
/// earlier message and answer plus the new message, each a named segment, so turn `k`'s prefix
/// is `[m1, a1, …, m_{k-1}, a_{k-1}, m_k]` (covering its prompt) and turn `k + 1`'s prefix starts
/// with it. Turn `k`'s answer is its [`output_segment`](crate::Request::output_segment) (the
/// conversation's last turn has none: no later prompt contains it).
///
/// Turn `k + 1` [`follows`](crate::Request::follows) turn `k` with a think time drawn from
/// `think_time`: closed loop, released that long after turn `k` finishes, as vLLM's multi-turn
/// benchmark clients do. Its nominal `arrival_s` is turn `k`'s arrival plus the think time, the
/// earliest it can be released; requests are sorted by that nominal time (ties by conversation
/// then turn) and numbered in that order, so a follower's id is larger than the id it follows.
///
/// Every turn's lengths and think time are drawn before `max_context` is applied, so the cap
/// only ends conversations early and leaves the other conversations' draws as they were.
#[derive(Debug, Clone, PartialEq)]
pub struct ConversationSpec {
    /// How conversations start.
    pub arrivals: Arrivals,
    /// How many conversations (1..=[`MAX_REQUESTS`]).
    pub conversations: u64,
    /// Turns per conversation (at most [`MAX_TURNS`]).
    pub turns: LengthSpec,
    /// Length of the first user message.
    pub first_message: LengthSpec,
    /// Length of each later user message.
    pub message: LengthSpec,
    /// Length of each answer.
    pub output: LengthSpec,
    /// Pause between a turn's end and the next turn.
    pub think_time: ThinkTime,
    /// A turn whose prompt plus output would exceed this many tokens is not sent, and the
    /// conversation ends before it (the first turn is always sent). `u32::MAX` when not given,
    /// so every prompt fits a `u32`.
    pub max_context: u32,
    /// Keep only the first this many requests in arrival order (`None`: all of them).
    pub max_requests: Option<u64>,
}

impl ConversationSpec {
    /// Checks every part, including `conversations ×` the most turns ≤ [`MAX_REQUESTS`] (for
    /// `trace:FILE` turns, once the file is read).
    pub fn check(&self) -> Result<()> {
        self.arrivals.check()?;
        if self.conversations == 0 || self.conversations > MAX_REQUESTS {
            return Err(Error::OutOfRange {
                field: "conversation.conversations",
                got: self.conversations.to_string(),
                expected: format!("a number of conversations from 1 to {MAX_REQUESTS}"),
            });
        }
        self.arrivals
            .check_span(self.conversations, "conversations")?;
        self.turns.check("conversation.turns")?;
        if let LengthSpec::Trace(_) = self.turns {
            return Err(Error::Conflict {
                field: "conversation.turns",
                why: "`trace:FILE` resamples token counts, not turns; give `N`, `uniform:LO:HI`, `zipf:LO:HI[:THETA]` or `lognormal:MEDIAN:SIGMA:MAX`".into(),
            });
        }
        self.first_message.check("conversation.first_message_len")?;
        self.message.check("conversation.message_len")?;
        self.output.check("output_lengths")?;
        self.think_time.check("conversation.think_time_s")?;
        if self.max_context == 0 {
            return Err(Error::NonPositive {
                field: "conversation.max_context",
                value: 0,
            });
        }
        if let Some(t) = self.turns.upper_bound() {
            check_turns(t, self.conversations)?;
        }
        if let Some(n) = self.max_requests {
            check_requests(n)?;
        }
        Ok(())
    }
}

pub(crate) fn check_turns(max_turns: u32, conversations: u64) -> Result<()> {
    if max_turns > MAX_TURNS {
        return Err(Error::OutOfRange {
            field: "conversation.turns",
            got: format!("up to {max_turns} turns"),
            expected: format!(
                "at most {MAX_TURNS} turns per conversation (give the spec a smaller HI or MAX)"
            ),
        });
    }
    if conversations.saturating_mul(u64::from(max_turns)) > MAX_REQUESTS {
        return Err(Error::OutOfRange {
            field: "conversation.conversations",
            got: format!("{conversations} conversations of up to {max_turns} turns"),
            expected: format!("at most {MAX_REQUESTS} requests in all"),
        });
    }
    Ok(())
}

/// The raw `[workload.shared_prefix]` table: inference-perf's shared-prefix data
/// ([`SharedPrefixSpec`]). Arrivals, `qps`, `cv`, `output_lengths`, `requests` and `seed` come
/// from `[workload]`; `prompt_lengths` is refused (a prompt is a system prompt plus a question).
///
/// ```toml
/// [workload]
/// arrivals = "poisson"
/// qps = 5.0
/// output_lengths = "300"
/// requests = 2000
///
/// [workload.shared_prefix]
/// groups = 11             # system prompts
/// users_per_group = 4     # users (questions) per system prompt
/// system_prompt_len = "100"
/// question_len = "466"
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SharedPrefixConfig {
    /// Number of system prompts (groups), ≥ 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub groups: Option<u64>,
    /// Users per group, ≥ 1; each user has one fixed question.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub users_per_group: Option<u64>,
    /// System prompt length spec (drawn once per group; usually a fixed `N`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_prompt_len: Option<String>,
    /// Question length spec (drawn once per user).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub question_len: Option<String>,
}

/// The raw `[workload.conversation]` table: multi-turn conversations ([`ConversationSpec`]).
/// Arrivals, `qps` (conversations per second), `cv`, `output_lengths` (per turn) and `seed` come
/// from `[workload]`; there `requests` is optional and keeps only the first requests in arrival
/// order; `prompt_lengths` is refused.
///
/// ```toml
/// [workload]
/// arrivals = "poisson"
/// qps = 0.5                          # conversations per second
/// output_lengths = "lognormal:200:0.6:2048"
///
/// [workload.conversation]
/// conversations = 100
/// turns = "uniform:2:8"
/// first_message_len = "lognormal:400:0.8:4096"
/// message_len = "lognormal:60:0.8:1024"
/// think_time_s = "exp:5"             # after the previous turn finishes
/// max_context = 8192                 # optional: end a conversation before it exceeds this
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConversationConfig {
    /// Number of conversations, ≥ 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversations: Option<u64>,
    /// Turns per conversation: a length spec (whole numbers ≥ 1, at most [`MAX_TURNS`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turns: Option<String>,
    /// Length spec of each conversation's first user message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_message_len: Option<String>,
    /// Length spec of every later user message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_len: Option<String>,
    /// Think time in seconds between a turn's end and the next turn ([`ThinkTime`] grammar).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub think_time_s: Option<String>,
    /// Optional cap in tokens on a turn's prompt plus output; the conversation ends before a
    /// turn that would exceed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_context: Option<u64>,
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
    /// inference-perf's shared-prefix data: system prompts shared by groups of users.
    SharedPrefix(SharedPrefixSpec),
    /// Multi-turn conversations whose turns share the conversation so far.
    Conversation(ConversationSpec),
}

/// The raw workload description, as a TOML `[workload]` table or CLI flags hold it. Every field
/// is optional here; [`WorkloadConfig::validate`] says which are needed.
///
/// Synthetic: `arrivals`, `qps` (not for `all-at-once`), `cv` (only for `gamma`),
/// `prompt_lengths`, `output_lengths`, `requests`, `seed` (default [`DEFAULT_SEED`]).
/// Replay: `trace` with optional `requests` (cap), `qps` (rate scaling) or `time_scale`, and
/// `start_s`.
/// Shared prefix: a `[workload.shared_prefix]` subtable ([`SharedPrefixConfig`]) with the
/// synthetic fields but `prompt_lengths`.
/// Conversations: a `[workload.conversation]` subtable ([`ConversationConfig`]) with the
/// synthetic fields but `prompt_lengths`, `requests` optional (a cap).
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
    /// Mean requests per second (synthetic, shared prefix), conversations started per second
    /// (conversations), or the target rate a trace is scaled to.
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
    /// Number of requests (synthetic, shared prefix), or a cap on the requests replayed from a
    /// trace or kept from conversations (the first in arrival order).
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
    /// inference-perf's shared-prefix data instead of independent prompts
    /// (`[workload.shared_prefix]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_prefix: Option<SharedPrefixConfig>,
    /// Multi-turn conversations instead of independent requests (`[workload.conversation]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation: Option<ConversationConfig>,
}

impl WorkloadConfig {
    /// The seed, or [`DEFAULT_SEED`].
    pub fn seed(&self) -> u64 {
        self.seed.unwrap_or(DEFAULT_SEED)
    }

    /// The files this workload reads, each with the field that names it: the trace, and every
    /// length given as `trace:FILE`.
    pub fn input_files(&self) -> Vec<(&'static str, PathBuf)> {
        let (sp, conv) = (self.shared_prefix.as_ref(), self.conversation.as_ref());
        let specs = [
            ("workload.prompt_lengths", self.prompt_lengths.as_ref()),
            ("workload.output_lengths", self.output_lengths.as_ref()),
            (
                "workload.shared_prefix.system_prompt_len",
                sp.and_then(|c| c.system_prompt_len.as_ref()),
            ),
            (
                "workload.shared_prefix.question_len",
                sp.and_then(|c| c.question_len.as_ref()),
            ),
            (
                "workload.conversation.first_message_len",
                conv.and_then(|c| c.first_message_len.as_ref()),
            ),
            (
                "workload.conversation.message_len",
                conv.and_then(|c| c.message_len.as_ref()),
            ),
        ];
        let traces =
            specs
                .into_iter()
                .filter_map(|(field, spec)| match spec?.parse::<LengthSpec>() {
                    Ok(LengthSpec::Trace(p)) => Some((field, p)),
                    _ => None,
                });
        (self
            .trace
            .clone()
            .map(|p| ("workload.trace", p))
            .into_iter())
        .chain(traces)
        .collect()
    }

    /// Checks the fields and derives the typed spec.
    pub fn validate(&self) -> Result<WorkloadSpec> {
        if self.shared_prefix.is_some() && self.conversation.is_some() {
            return Err(Error::Conflict {
                field: "conversation",
                why:
                    "give either `[workload.shared_prefix]` or `[workload.conversation]`, not both"
                        .into(),
            });
        }
        if let Some(path) = &self.trace {
            for (field, given) in [
                ("shared_prefix", self.shared_prefix.is_some()),
                ("conversation", self.conversation.is_some()),
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
        if let Some(sp) = &self.shared_prefix {
            return self.shared_prefix(sp, arrivals);
        }
        if let Some(c) = &self.conversation {
            return self.conversation(c, arrivals);
        }
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
        let requests = self
            .requests
            .or(arrivals.default_requests())
            .ok_or(Error::Missing {
                field: "requests",
                why: "the number of requests to generate, ≥ 1",
            })?;
        let spec = SyntheticSpec {
            arrivals,
            prompt,
            output,
            requests,
        };
        spec.check()?;
        Ok(WorkloadSpec::Synthetic(spec))
    }

    fn output(&self) -> Result<LengthSpec> {
        LengthSpec::parse(
            "output_lengths",
            self.output_lengths.as_deref().ok_or(Error::Missing {
                field: "output_lengths",
                why: LENGTH_FORMS,
            })?,
        )
    }

    fn no_prompt_lengths(&self, table: &str, why: &str) -> Result<()> {
        match self.prompt_lengths {
            Some(_) => Err(Error::Conflict {
                field: "prompt_lengths",
                why: format!("not used with `[workload.{table}]` ({why})"),
            }),
            None => Ok(()),
        }
    }

    fn shared_prefix(&self, sp: &SharedPrefixConfig, arrivals: Arrivals) -> Result<WorkloadSpec> {
        self.no_prompt_lengths(
            "shared_prefix",
            "a prompt is a system prompt of `shared_prefix.system_prompt_len` tokens plus a question of `shared_prefix.question_len`",
        )?;
        let count = |field: &'static str, v: Option<u64>, why: &'static str| -> Result<u32> {
            let v = v.ok_or(Error::Missing { field, why })?;
            if v == 0 {
                return Err(Error::NonPositive { field, value: 0 });
            }
            if v > MAX_REQUESTS {
                return Err(Error::OutOfRange {
                    field,
                    got: v.to_string(),
                    expected: format!("a whole number from 1 to {MAX_REQUESTS}"),
                });
            }
            // At most MAX_REQUESTS, so it fits.
            Ok(v as u32)
        };
        let length = |field: &'static str, v: &Option<String>| -> Result<LengthSpec> {
            LengthSpec::parse(
                field,
                v.as_deref().ok_or(Error::Missing {
                    field,
                    why: LENGTH_FORMS,
                })?,
            )
        };
        let spec = SharedPrefixSpec {
            arrivals,
            groups: count(
                "shared_prefix.groups",
                sp.groups,
                "the number of system prompts (groups), ≥ 1",
            )?,
            users_per_group: count(
                "shared_prefix.users_per_group",
                sp.users_per_group,
                "the number of users (questions) per system prompt, ≥ 1",
            )?,
            system_prompt: length("shared_prefix.system_prompt_len", &sp.system_prompt_len)?,
            question: length("shared_prefix.question_len", &sp.question_len)?,
            output: self.output()?,
            requests: self.requests.ok_or(Error::Missing {
                field: "requests",
                why: "the number of requests to generate, ≥ 1",
            })?,
        };
        spec.check()?;
        Ok(WorkloadSpec::SharedPrefix(spec))
    }

    fn conversation(&self, c: &ConversationConfig, arrivals: Arrivals) -> Result<WorkloadSpec> {
        self.no_prompt_lengths(
            "conversation",
            "a turn's prompt is the conversation so far plus a message of `conversation.first_message_len` or `conversation.message_len` tokens",
        )?;
        let length = |field: &'static str, v: &Option<String>| -> Result<LengthSpec> {
            LengthSpec::parse(
                field,
                v.as_deref().ok_or(Error::Missing {
                    field,
                    why: LENGTH_FORMS,
                })?,
            )
        };
        let max_context = match c.max_context {
            None => u32::MAX,
            Some(n) => {
                u32::try_from(n)
                    .ok()
                    .filter(|&n| n >= 1)
                    .ok_or_else(|| Error::OutOfRange {
                        field: "conversation.max_context",
                        got: n.to_string(),
                        expected: TOKENS.into(),
                    })?
            }
        };
        let spec = ConversationSpec {
            arrivals,
            conversations: c.conversations.ok_or(Error::Missing {
                field: "conversation.conversations",
                why: "the number of conversations, ≥ 1",
            })?,
            turns: length("conversation.turns", &c.turns)?,
            first_message: length("conversation.first_message_len", &c.first_message_len)?,
            message: length("conversation.message_len", &c.message_len)?,
            output: self.output()?,
            think_time: ThinkTime::parse(
                "conversation.think_time_s",
                c.think_time_s.as_deref().ok_or(Error::Missing {
                    field: "conversation.think_time_s",
                    why: THINK_FORMS,
                })?,
            )?,
            max_context,
            max_requests: self.requests,
        };
        spec.check()?;
        Ok(WorkloadSpec::Conversation(spec))
    }
}
