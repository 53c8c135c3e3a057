//! Requests drawn as they are served: the same report as the whole list, byte for byte, while
//! the engine holds only the requests in flight.

use kvplan_serve::scenario::RawServeScenario;
use kvplan_serve::{MAX_RECORDED_REQUESTS, ServeReport};
use kvplan_vocab::{Progress, Silent};

fn scenario(text: &str) -> kvplan_serve::scenario::ServeScenario {
    let raw: RawServeScenario = toml::from_str(text).unwrap();
    raw.resolve().unwrap()
}

fn json(out: &ServeReport) -> Vec<u8> {
    let mut v = Vec::new();
    out.write_summary_json(&mut v).unwrap();
    out.write_requests_csv(&mut v).unwrap();
    out.write_timeseries_csv(&mut v).unwrap();
    v
}

const CASES: [&str; 5] = [
    // Overloaded V1: preemption by recompute, prefix cache, async scheduling.
    r#"model = "llama-2-7b"
hardware = "a100-80g-sxm"
[workload]
arrivals = "poisson"
qps = 60.0
prompt_lengths = "uniform:64:1500"
output_lengths = "uniform:1:400"
requests = 600
[serve]
num_gpu_blocks_override = 400
"#,
    // vLLM 0.4 with swap, rejections (prompts longer than max_model_len), bursty arrivals.
    r#"model = "llama-2-7b"
hardware = "a100-80g-sxm"
[workload]
arrivals = "gamma:3"
qps = 30.0
prompt_lengths = "zipf:16:3000"
output_lengths = "uniform:1:300"
requests = 500
[serve]
scheduler = "vllm-v0"
preemption = "swap"
max_model_len = 2048
num_gpu_blocks_override = 300
"#,
    // Hybrid preemption on the chunked scheduler.
    r#"model = "opt-6.7b"
hardware = "a100-80g-sxm"
[workload]
arrivals = "poisson"
qps = 40.0
prompt_lengths = "uniform:100:900"
output_lengths = "uniform:50:300"
requests = 400
[serve]
scheduler = "chunked"
preemption = "hybrid"
num_gpu_blocks_override = 250
"#,
    // Shared prefixes.
    r#"model = "llama-2-7b"
hardware = "h100-sxm"
[workload]
arrivals = "poisson"
qps = 20.0
output_lengths = "uniform:1:200"
requests = 500
[workload.shared_prefix]
groups = 5
users_per_group = 7
system_prompt_len = "300"
question_len = "uniform:20:200"
"#,
    // Conversations: closed loop.
    r#"model = "llama-2-7b"
hardware = "h100-sxm"
[workload]
arrivals = "poisson"
qps = 8.0
output_lengths = "uniform:10:200"
[workload.conversation]
conversations = 60
turns = "uniform:1:6"
first_message_len = "uniform:50:400"
message_len = "uniform:10:100"
think_time_s = "exp:2"
"#,
];

/// Streamed or held, with or without records: the same summary, records and series, byte for
/// byte.
#[test]
fn a_stream_serves_as_the_whole_list() {
    for case in CASES {
        let sc = scenario(case);
        let held = sc.run(&sc.requests().unwrap()).unwrap();
        let streamed = sc
            .run_stream(sc.request_stream().unwrap(), &Silent)
            .unwrap();
        assert_eq!(json(&held), json(&streamed), "{case}");
        assert_eq!(held.requests.len(), streamed.requests.len());
        let mut lean = sc.clone();
        lean.config.record_requests = false;
        let out = lean
            .run_stream(lean.request_stream().unwrap(), &Silent)
            .unwrap();
        assert!(out.requests.is_empty());
        assert_eq!(out.summary, held.summary, "{case}");
        let (mut a, mut b) = (Vec::new(), Vec::new());
        out.write_summary_json(&mut a).unwrap();
        held.write_summary_json(&mut b).unwrap();
        assert_eq!(a, b);
    }
}

/// Counts what it hears.
#[derive(Default)]
struct Heard(std::sync::Mutex<(u64, u64, String)>);

impl Progress for Heard {
    fn start(&self, total: u64, what: &str) {
        let mut h = self.0.lock().unwrap();
        h.0 = total;
        h.2 = what.to_string();
    }
    fn set(&self, done: u64) {
        self.0.lock().unwrap().1 = done;
    }
}

#[test]
fn progress_hears_every_request_served() {
    let sc = scenario(CASES[0]);
    let heard = Heard::default();
    sc.run_stream(sc.request_stream().unwrap(), &heard).unwrap();
    let h = heard.0.lock().unwrap();
    assert_eq!((h.0, h.1, h.2.as_str()), (600, 600, "requests served"));
}

/// Per-request records are held to the end: past the ceiling the run is refused before it
/// starts, naming the request count; without records the same count is accepted and served
/// (stopped once the first requests are: serving ten million takes minutes).
#[test]
fn records_past_the_ceiling_are_refused_up_front() {
    let n = MAX_RECORDED_REQUESTS + 1;
    let sc = scenario(&CASES[0].replace("requests = 600", &format!("requests = {n}")));
    let refused = Stop::default();
    let e = sc
        .run_stream(sc.request_stream().unwrap(), &refused)
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with(&format!(
            "requests: {n} is more than the {MAX_RECORDED_REQUESTS} requests"
        )),
        "{e}"
    );
    assert_eq!(*refused.0.lock().unwrap(), None, "the refused run started");
    // Drawing the stream costs nothing: the requests are not generated up front.
    let mut lean = sc.clone();
    lean.config.record_requests = false;
    let stream = lean.request_stream().unwrap();
    assert_eq!(stream.len(), n);
    // The same count without records runs: it starts, and serves requests until `Stop` stops
    // it at its first progress report.
    let accepted = Stop::default();
    let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        lean.run_stream(stream, &accepted)
    }));
    match run {
        Err(p) => assert!(p.is::<Stopped>(), "the run failed otherwise"),
        Ok(r) => panic!(
            "a run of {n} requests ended: {:?}",
            r.map(|o| o.summary.requests)
        ),
    }
    let (total, served) = accepted.0.lock().unwrap().expect("the run started");
    assert_eq!(total, n);
    assert!(served > 0, "no request served");
}

/// What [`Stop`] unwinds with.
struct Stopped;

/// Hears a run start (its total) and stops it at its first report of requests served.
#[derive(Default)]
struct Stop(std::sync::Mutex<Option<(u64, u64)>>);

impl Progress for Stop {
    fn start(&self, total: u64, _: &str) {
        *self.0.lock().unwrap() = Some((total, 0));
    }
    fn set(&self, done: u64) {
        if let Some(h) = self.0.lock().unwrap().as_mut() {
            h.1 = done;
        }
        std::panic::panic_any(Stopped);
    }
}
