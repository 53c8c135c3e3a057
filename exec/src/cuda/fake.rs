//! A fake CUDA driver: the CUDA executor on simulated GPUs, so its stream placement, event
//! ordering, buffers, copies and kernel launches run (and are checked) without a GPU or a CUDA
//! toolkit.
//!
//! [`open`] gives the real CUDA executor (`executor.rs`, the code the `cuda` backend runs) on a
//! driver that simulates the calls it makes, deterministically, on the CPU:
//! - **Streams** are FIFO queues with a virtual clock each (nanoseconds). Work issued on a stream
//!   starts when the stream has finished its earlier work, when every event it was told to wait
//!   for has completed, and not before the host's clock; it then takes its modelled time.
//! - **Events** complete at the clock of the stream they were recorded on; a wait takes the
//!   event's latest record at the time of the call, as `cuStreamWaitEvent` does. Recording on
//!   another device's stream, waiting on a never-recorded event, and reading the time between
//!   events that have not completed are faults.
//! - **The host's clock** moves only when it synchronises a stream (to that stream's clock):
//!   issuing is instant. Host threads run for real, but no time depends on their interleaving,
//!   so the same schedule gives the same timeline, bit for bit.
//! - **Time of work** ([`FakeGpu`]): copies take `bytes / bandwidth` (pinned, pageable or peer),
//!   kernels the longer of their FLOPs over `flops` and their bytes over `memory_bytes_per_s`,
//!   each plus `fixed_ns`; the head-start spin kernel takes exactly what it is asked.
//! - **Memory**: allocations get addresses in a private address space, never reused. Every copy
//!   and kernel must stay inside one live allocation of the right device (else a fault); pinned
//!   host memory is the fake's own, any other host address counts as pageable. Each access is
//!   kept with its stream and virtual interval, so [`FakeLog::hazards`] finds two streams
//!   touching one buffer at overlapping times with at least one writing, and a buffer freed (in
//!   its stream's order) while another stream still reads or writes it.
//! - **Faults** (misuse a real GPU would report, or silently get wrong) are recorded and make the
//!   device's deferred-error check fail, so the executor's run returns an error.
//! - **A record of every call** ([`FakeLog::calls`]), and of the work done
//!   ([`FakeLog::work`]), for tests to compare with the schedule.
//!
//! Not modelled: pageable copies blocking the host, copy engines shared between streams,
//! launch latency on the host, kernel-specific limits (shared memory per block), values.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use kvplan_vocab::DType;

use super::api::Driver;
use super::driver::guarded;
use super::executor::CudaExecutor;
use super::launch::attention_workspace;
use crate::backend::{BackendKind, DeviceInfo, ExecOptions, Executor};
use crate::error::Error;
use crate::kernel::{AttentionShape, Strided};

/// The simulated GPUs: how many, and the rates that time their work.
#[derive(Debug, Clone, PartialEq)]
pub struct FakeGpu {
    /// Devices (ordinals `0..devices`).
    pub devices: usize,
    /// Device memory per device, in bytes.
    pub memory_bytes: u64,
    /// Streaming multiprocessors per device (size the attention workspace).
    pub sms: u32,
    /// Host↔device copies from or to pinned memory, bytes per second.
    pub pinned_bytes_per_s: f64,
    /// Host↔device copies from or to pageable memory, bytes per second.
    pub pageable_bytes_per_s: f64,
    /// Device→device copies, bytes per second.
    pub peer_bytes_per_s: f64,
    /// Device memory bandwidth of kernels, bytes per second.
    pub memory_bytes_per_s: f64,
    /// Arithmetic rate of GEMMs and attention, FLOP per second.
    pub flops: f64,
    /// Fixed time of every copy and kernel, nanoseconds.
    pub fixed_ns: u64,
}

impl Default for FakeGpu {
    /// One H100-like device: 80 GiB, 132 SMs, 25 GB/s pinned and 8 GB/s pageable PCIe copies,
    /// 150 GB/s peer copies, 3 TB/s memory, 400 TFLOP/s, 3 µs per op.
    fn default() -> Self {
        FakeGpu {
            devices: 1,
            memory_bytes: 80 << 30,
            sms: 132,
            pinned_bytes_per_s: 25e9,
            pageable_bytes_per_s: 8e9,
            peer_bytes_per_s: 150e9,
            memory_bytes_per_s: 3e12,
            flops: 400e12,
            fixed_ns: 3_000,
        }
    }
}

impl FakeGpu {
    fn check(&self) -> Result<(), Error> {
        let rates = [
            ("pinned_bytes_per_s", self.pinned_bytes_per_s),
            ("pageable_bytes_per_s", self.pageable_bytes_per_s),
            ("peer_bytes_per_s", self.peer_bytes_per_s),
            ("memory_bytes_per_s", self.memory_bytes_per_s),
            ("flops", self.flops),
        ];
        if self.devices == 0 || self.sms == 0 {
            return Err(Error::InvalidInput(
                "a fake GPU needs at least one device and one SM".into(),
            ));
        }
        for (name, r) in rates {
            if !(r.is_finite() && r > 0.0) {
                return Err(Error::InvalidInput(format!(
                    "fake GPU {name} = {r}: must be a positive number"
                )));
            }
        }
        Ok(())
    }
}

/// A stream of the fake: its device and its index among that device's streams in creation order
/// (the executor's pool slot).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FakeStream {
    /// Device ordinal.
    pub device: usize,
    /// Index among the device's streams.
    pub index: usize,
}

/// An event of the fake: its device and its index among that device's events in creation order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FakeEvent {
    /// Device ordinal.
    pub device: usize,
    /// Index among the device's events.
    pub index: usize,
}

/// What a piece of work on a stream is.
#[derive(Debug, Clone, PartialEq)]
pub enum WorkKind {
    /// The head-start kernel: spins for `ns`.
    Spin {
        /// Nanoseconds.
        ns: u64,
    },
    /// The data fill of a newly allocated buffer.
    Fill {
        /// Bytes written.
        bytes: u64,
    },
    /// Host to device.
    H2D {
        /// Bytes.
        bytes: u64,
        /// From the fake's pinned memory (else pageable).
        pinned: bool,
    },
    /// Device to host.
    D2H {
        /// Bytes.
        bytes: u64,
        /// To the fake's pinned memory (else pageable).
        pinned: bool,
    },
    /// Device to device.
    Peer {
        /// Bytes.
        bytes: u64,
        /// Receiving device (the stream's own for a copy within a device).
        to: usize,
    },
    /// A GEMM (`batch` products of `m x k` by `k x n`).
    Gemm {
        /// Rows of A and C.
        m: usize,
        /// Columns of B and C.
        n: usize,
        /// Inner dimension.
        k: usize,
        /// Products.
        batch: usize,
        /// Element type.
        dtype: DType,
    },
    /// Attention.
    Attention {
        /// Its shape.
        shape: AttentionShape,
        /// Element type.
        dtype: DType,
    },
    /// The elementwise kernel.
    Elementwise {
        /// Elements written.
        elems: u64,
        /// Element type.
        dtype: DType,
    },
}

/// A copy or kernel as the fake ran it, in virtual nanoseconds, with what it is ordered after.
#[derive(Debug, Clone, PartialEq)]
pub struct Work {
    /// Where it ran.
    pub stream: FakeStream,
    /// What it was.
    pub kind: WorkKind,
    /// When it started.
    pub start_ns: u64,
    /// When it ended.
    pub end_ns: u64,
    /// Its position on its stream (work and event records count, from 1).
    pub seq: u64,
    /// Per other stream, the position up to which that stream's work must have finished before
    /// this work starts — through events waited on and host synchronisation (a vector clock).
    pub after: BTreeMap<FakeStream, u64>,
}

impl Work {
    /// Whether the driver orders `self` after `other` has finished, whatever the timing: later on
    /// the same stream, or through events and host synchronisation.
    pub fn happens_after(&self, other: &Work) -> bool {
        if self.stream == other.stream {
            self.seq > other.seq
        } else {
            self.after
                .get(&other.stream)
                .is_some_and(|&p| p >= other.seq)
        }
    }
}

/// One call into the fake driver, with what it did to the clocks.
#[derive(Debug, Clone, PartialEq)]
#[allow(missing_docs)]
pub enum Call {
    DeviceCount,
    Open {
        device: usize,
    },
    FreeMemory {
        device: usize,
    },
    EnablePeer {
        from: usize,
        to: usize,
    },
    Bind {
        device: usize,
    },
    CheckErr {
        device: usize,
    },
    NewStream(FakeStream),
    NewBlas(FakeStream),
    NewEvent(FakeEvent),
    /// `event` now completes at `at_ns`.
    Record {
        event: FakeEvent,
        stream: FakeStream,
        at_ns: u64,
    },
    /// `stream`'s later work starts no earlier than `until_ns` (`None`: never recorded).
    Wait {
        stream: FakeStream,
        event: FakeEvent,
        until_ns: Option<u64>,
    },
    /// The host's clock is now `host_ns`.
    Synchronize {
        stream: FakeStream,
        host_ns: u64,
    },
    Elapsed {
        from: FakeEvent,
        to: FakeEvent,
    },
    Alloc {
        device: usize,
        stream: FakeStream,
        bytes: u64,
    },
    Free {
        device: usize,
        bytes: u64,
    },
    AllocPinned {
        bytes: u64,
    },
    FreePinned {
        bytes: u64,
    },
    /// A copy or kernel.
    Work(Work),
}

/// What the fake recorded: shared with the executor it drives, readable at any time.
#[derive(Clone)]
pub struct FakeLog(Arc<Mutex<State>>);

impl std::fmt::Debug for FakeLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = lock(&self.0);
        f.debug_struct("FakeLog")
            .field("calls", &s.calls.len())
            .field("faults", &s.faults.len())
            .finish()
    }
}

impl FakeLog {
    /// Every call, in the order it arrived (the stream threads' calls interleave in whatever
    /// order they ran; each stream's own calls are in order).
    pub fn calls(&self) -> Vec<Call> {
        lock(&self.0).calls.clone()
    }

    /// Every copy and kernel, by stream (device, then index) and in issue order on each.
    pub fn work(&self) -> Vec<Work> {
        let s = lock(&self.0);
        let mut w: Vec<&(u64, Work)> = s.work.iter().collect();
        w.sort_by_key(|(seq, w)| (w.stream, *seq));
        w.into_iter().map(|(_, w)| w.clone()).collect()
    }

    /// Races on buffers: two streams touching one buffer, at least one writing, with neither
    /// access ordered after the other (by events or host synchronisation, whatever their
    /// times); and buffers freed while another stream's access was not ordered before the free.
    /// One sentence each, sorted.
    pub fn hazards(&self) -> Vec<String> {
        let s = lock(&self.0);
        let mut out = s.free_hazards.clone();
        for a in s.live.values().chain(&s.dead) {
            for (i, x) in a.accesses.iter().enumerate() {
                for y in &a.accesses[i + 1..] {
                    if x.stream != y.stream && (x.write || y.write) && !x.ordered(y) {
                        out.push(format!(
                            "{}: {} races with {}",
                            a.describe(),
                            x.describe(&s),
                            y.describe(&s)
                        ));
                    }
                }
            }
        }
        out.sort();
        out.dedup();
        out
    }

    /// Misuse of the driver (out-of-bounds or wrong-device accesses, events across devices,
    /// waits on events never recorded, times read before completion), sorted.
    pub fn faults(&self) -> Vec<String> {
        let mut f = lock(&self.0).faults.clone();
        f.sort();
        f
    }

    /// Forgets the calls and work recorded so far, so the next run's can be read alone; what
    /// [`FakeLog::hazards`] and [`FakeLog::faults`] report is kept (they span every run).
    pub fn clear_calls(&self) {
        let mut s = lock(&self.0);
        s.calls.clear();
        s.work.clear();
    }
}

/// The CUDA executor on `gpu`, simulated; and what it records. `options.device` picks the
/// fake's ordinal of schedule device 0, as on a real machine.
pub fn open(options: &ExecOptions, gpu: &FakeGpu) -> Result<(Box<dyn Executor>, FakeLog), Error> {
    gpu.check()?;
    let state = Arc::new(Mutex::new(State::new(gpu.clone())));
    let drv = FakeDriver {
        state: state.clone(),
    };
    let ex = guarded(|| CudaExecutor::with_driver(drv, options))?;
    Ok((Box::new(ex), FakeLog(state)))
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One access of a buffer.
#[derive(Debug, Clone)]
struct Access {
    /// Global stream index.
    stream: usize,
    /// Position on the stream.
    pos: u64,
    /// The stream's vector clock at the access.
    vc: Vec<u64>,
    start: u64,
    end: u64,
    write: bool,
}

impl Access {
    /// Whether one of the two is ordered after the other.
    fn ordered(&self, other: &Access) -> bool {
        clock(&other.vc, self.stream) >= self.pos || clock(&self.vc, other.stream) >= other.pos
    }

    fn describe(&self, s: &State) -> String {
        let id = s.streams[self.stream].id;
        format!(
            "{} on gpu{} stream {} [{}, {}) ns",
            if self.write { "a write" } else { "a read" },
            id.device,
            id.index,
            self.start,
            self.end
        )
    }
}

/// Component `i` of a vector clock.
fn clock(vc: &[u64], i: usize) -> u64 {
    vc.get(i).copied().unwrap_or(0)
}

/// `into = max(into, from)`, component by component.
fn merge(into: &mut Vec<u64>, from: &[u64]) {
    if into.len() < from.len() {
        into.resize(from.len(), 0);
    }
    for (a, &b) in into.iter_mut().zip(from) {
        *a = (*a).max(b);
    }
}

/// Where a piece of work sits: its virtual interval and its position on its stream.
#[derive(Clone, Copy)]
struct Slot {
    start: u64,
    end: u64,
    pos: u64,
}

/// A device (or pinned host) allocation.
struct Alloc {
    id: u64,
    base: u64,
    len: u64,
    /// `None`: pinned host memory.
    device: Option<usize>,
    /// The stream it was allocated (and is freed) on.
    stream: Option<usize>,
    accesses: Vec<Access>,
}

impl Alloc {
    fn describe(&self) -> String {
        match self.device {
            Some(d) => format!("buffer #{} (gpu{d}, {} bytes)", self.id, self.len),
            None => format!("pinned buffer #{} ({} bytes)", self.id, self.len),
        }
    }
}

struct StreamState {
    id: FakeStream,
    /// When its work so far ends (virtual ns).
    clock: u64,
    /// Work and records issued on it so far.
    pos: u64,
    /// Its vector clock: per stream, the position this stream is ordered after.
    vc: Vec<u64>,
}

struct EventState {
    id: FakeEvent,
    /// Its latest record: when it completes, on which stream and position, and the vector
    /// clock a wait on it takes.
    at: Option<u64>,
    rec: Option<(usize, u64)>,
    vc: Vec<u64>,
}

struct State {
    gpu: FakeGpu,
    host_ns: u64,
    /// What the host has seen finish (by synchronising streams): a vector clock.
    host_vc: Vec<u64>,
    streams: Vec<StreamState>,
    events: Vec<EventState>,
    /// Streams and events per device so far.
    counts: Vec<(usize, usize)>,
    /// Next free address per device, then of pinned host memory.
    next: Vec<u64>,
    /// Device memory in use per device.
    used: Vec<u64>,
    live: BTreeMap<u64, Alloc>,
    dead: Vec<Alloc>,
    next_id: u64,
    seq: u64,
    calls: Vec<Call>,
    work: Vec<(u64, Work)>,
    faults: Vec<String>,
    free_hazards: Vec<String>,
}

/// Where the fake's pinned host memory lives (no real user-space address is this high).
const HOST_BASE: u64 = 0xF000_0000_0000_0000;

impl State {
    fn new(gpu: FakeGpu) -> Self {
        let n = gpu.devices;
        let mut next: Vec<u64> = (0..n).map(|d| (d as u64 + 1) << 40).collect();
        next.push(HOST_BASE);
        State {
            gpu,
            host_ns: 0,
            host_vc: Vec::new(),
            streams: Vec::new(),
            events: Vec::new(),
            counts: vec![(0, 0); n],
            next,
            used: vec![0; n],
            live: BTreeMap::new(),
            dead: Vec::new(),
            next_id: 0,
            seq: 0,
            calls: Vec::new(),
            work: Vec::new(),
            faults: Vec::new(),
            free_hazards: Vec::new(),
        }
    }

    fn fault(&mut self, msg: String) -> Error {
        self.faults.push(msg.clone());
        Error::Cuda {
            context: "the fake CUDA driver".into(),
            message: msg,
        }
    }

    fn new_alloc(&mut self, device: Option<usize>, stream: Option<usize>, bytes: u64) -> u64 {
        let slot = device.unwrap_or(self.gpu.devices);
        let base = self.next[slot];
        // Never reused; a gap after each, so a stale or overflowing address hits nothing.
        self.next[slot] = base + bytes.div_ceil(256).max(1) * 256 + 4096;
        let id = self.next_id;
        self.next_id += 1;
        self.live.insert(
            base,
            Alloc {
                id,
                base,
                len: bytes,
                device,
                stream,
                accesses: Vec::new(),
            },
        );
        base
    }

    /// Frees the allocation at `base`, in its stream's order (pinned memory: at the host's
    /// time), noting any access of another stream still in flight then.
    fn free(&mut self, base: u64) {
        let Some(a) = self.live.remove(&base) else {
            return;
        };
        // The host frees it on its stream: after that stream's work and what the host has seen
        // finish.
        let (at, mut vc) = match a.stream {
            Some(s) => (
                self.streams[s].clock.max(self.host_ns),
                self.streams[s].vc.clone(),
            ),
            None => (self.host_ns, Vec::new()),
        };
        merge(&mut vc, &self.host_vc);
        for x in &a.accesses {
            if clock(&vc, x.stream) < x.pos {
                let msg = format!(
                    "{} freed (at {at} ns) without waiting for {}",
                    a.describe(),
                    x.describe(self)
                );
                self.free_hazards.push(msg);
            }
        }
        match a.device {
            Some(d) => {
                self.used[d] = self.used[d].saturating_sub(a.len);
                self.calls.push(Call::Free {
                    device: d,
                    bytes: a.len,
                });
            }
            None => self.calls.push(Call::FreePinned { bytes: a.len }),
        }
        self.dead.push(a);
    }

    /// Notes an access of `bytes` at `ptr`, which must lie inside one live allocation of
    /// `device` (`None`: pinned host memory). Returns whether such an allocation was found.
    fn touch(
        &mut self,
        at: &Access,
        ptr: u64,
        bytes: u64,
        device: Option<usize>,
        what: &str,
    ) -> Result<bool, Error> {
        if bytes == 0 {
            return Ok(true);
        }
        let found = self
            .live
            .range_mut(..=ptr)
            .next_back()
            .map(|(_, a)| a)
            .filter(|a| ptr < a.base + a.len.max(1));
        let Some(a) = found else {
            if device.is_none() {
                // Host memory the fake did not allocate: pageable.
                return Ok(false);
            }
            return Err(self.fault(format!(
                "{what}: {bytes} bytes at {ptr:#x} are in no live allocation"
            )));
        };
        if a.device != device {
            let msg = format!(
                "{what}: {} holds the address {ptr:#x} but the access must be on {}",
                a.describe(),
                device.map_or("pinned host memory".to_string(), |d| format!("gpu{d}"))
            );
            return Err(self.fault(msg));
        }
        if ptr.checked_add(bytes).is_none_or(|e| e > a.base + a.len) {
            let msg = format!(
                "{what}: {bytes} bytes at offset {} overrun {}",
                ptr - a.base,
                a.describe()
            );
            return Err(self.fault(msg));
        }
        a.accesses.push(at.clone());
        Ok(true)
    }

    /// Starts `ns` of work on stream `s`: after its earlier work and the host's clock.
    /// Advances stream `s` by one item (work or a record) issued by the host now: ordered after
    /// what the host has seen finish. Returns its position.
    fn step(&mut self, s: usize) -> u64 {
        let st = &mut self.streams[s];
        merge(&mut st.vc, &self.host_vc);
        st.pos += 1;
        if st.vc.len() <= s {
            st.vc.resize(s + 1, 0);
        }
        st.vc[s] = st.pos;
        st.pos
    }

    /// Starts `ns` of work on stream `s`: after its earlier work and the host's clock.
    fn enqueue(&mut self, s: usize, ns: u64) -> Slot {
        let pos = self.step(s);
        let st = &mut self.streams[s];
        let start = st.clock.max(self.host_ns);
        st.clock = start + ns;
        Slot {
            start,
            end: start + ns,
            pos,
        }
    }

    fn push_work(&mut self, s: usize, kind: WorkKind, slot: Slot) {
        let after = self.streams[s]
            .vc
            .iter()
            .enumerate()
            .filter(|&(i, &p)| i != s && p > 0)
            .map(|(i, &p)| (self.streams[i].id, p))
            .collect();
        let w = Work {
            stream: self.streams[s].id,
            kind,
            start_ns: slot.start,
            end_ns: slot.end,
            seq: slot.pos,
            after,
        };
        self.calls.push(Call::Work(w.clone()));
        self.seq += 1;
        self.work.push((self.seq, w));
    }

    fn ns(&self, seconds: f64) -> u64 {
        self.gpu.fixed_ns + (seconds * 1e9).ceil().max(0.0) as u64
    }

    /// A kernel's time: the longer of its FLOPs and its bytes.
    fn kernel_ns(&self, flops: f64, bytes: f64) -> u64 {
        self.ns((flops / self.gpu.flops).max(bytes / self.gpu.memory_bytes_per_s))
    }

    fn access(&self, s: usize, slot: Slot, write: bool) -> Access {
        Access {
            stream: s,
            pos: slot.pos,
            vc: self.streams[s].vc.clone(),
            start: slot.start,
            end: slot.end,
            write,
        }
    }
}

/// The fake driver (shared state; every handle is an index into it).
pub(crate) struct FakeDriver {
    state: Arc<Mutex<State>>,
}

/// A device of the fake.
pub(crate) struct FakeDevice(usize);
/// A stream: its index in the fake's list.
pub(crate) struct StreamRef(usize);
/// An event: its index in the fake's list.
pub(crate) struct EventRef(usize);
/// A GEMM handle: the stream it launches on.
pub(crate) struct BlasRef(usize);

/// A device or pinned allocation; dropping it frees it.
pub(crate) struct FakeBuffer {
    base: u64,
    len: u64,
    state: Arc<Mutex<State>>,
}

impl Drop for FakeBuffer {
    fn drop(&mut self) {
        lock(&self.state).free(self.base);
    }
}

impl FakeDriver {
    fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }
}

impl Driver for FakeDriver {
    type Device = FakeDevice;
    type Stream = StreamRef;
    type Event = EventRef;
    type Blas = BlasRef;
    type Buffer = FakeBuffer;
    type Pinned = FakeBuffer;

    fn device_count(&mut self) -> Result<usize, Error> {
        let mut s = self.lock();
        s.calls.push(Call::DeviceCount);
        Ok(s.gpu.devices)
    }

    fn open(&mut self, ordinal: usize) -> Result<FakeDevice, Error> {
        let mut s = self.lock();
        if ordinal >= s.gpu.devices {
            return Err(s.fault(format!("opening device {ordinal}, which does not exist")));
        }
        s.calls.push(Call::Open { device: ordinal });
        Ok(FakeDevice(ordinal))
    }

    fn info(&self, d: &FakeDevice) -> Result<DeviceInfo, Error> {
        let s = self.lock();
        Ok(DeviceInfo {
            backend: BackendKind::Cuda,
            name: format!("fake CUDA device {} (simulated, no GPU)", d.0),
            driver: "kvplan fake CUDA driver".into(),
            memory_bytes: Some(s.gpu.memory_bytes),
            parallelism: Some(s.gpu.sms),
        })
    }

    fn sms(&self, _d: &FakeDevice) -> u32 {
        self.lock().gpu.sms
    }

    fn free_memory(&self, d: &FakeDevice) -> Result<u64, Error> {
        let mut s = self.lock();
        s.calls.push(Call::FreeMemory { device: d.0 });
        Ok(s.gpu.memory_bytes.saturating_sub(s.used[d.0]))
    }

    fn enable_peer(&self, from: &FakeDevice, to: &FakeDevice) -> Result<(), Error> {
        self.lock().calls.push(Call::EnablePeer {
            from: from.0,
            to: to.0,
        });
        Ok(())
    }

    fn bind(&self, d: &FakeDevice) -> Result<(), Error> {
        self.lock().calls.push(Call::Bind { device: d.0 });
        Ok(())
    }

    fn check_err(&self, d: &FakeDevice) -> Result<(), Error> {
        let mut s = self.lock();
        s.calls.push(Call::CheckErr { device: d.0 });
        match s.faults.first() {
            Some(f) => Err(Error::Cuda {
                context: "a deferred CUDA error".into(),
                message: format!("the fake driver recorded a fault: {f}"),
            }),
            None => Ok(()),
        }
    }

    fn new_stream(&self, d: &FakeDevice) -> Result<StreamRef, Error> {
        let mut s = self.lock();
        let index = s.counts[d.0].0;
        s.counts[d.0].0 += 1;
        let id = FakeStream { device: d.0, index };
        let (clock, vc) = (s.host_ns, s.host_vc.clone());
        s.streams.push(StreamState {
            id,
            clock,
            pos: 0,
            vc,
        });
        s.calls.push(Call::NewStream(id));
        Ok(StreamRef(s.streams.len() - 1))
    }

    fn new_blas(&self, d: &FakeDevice, st: &StreamRef) -> Result<BlasRef, Error> {
        let mut s = self.lock();
        let id = s.streams[st.0].id;
        if id.device != d.0 {
            return Err(s.fault(format!(
                "a GEMM handle of gpu{} on a stream of gpu{}",
                d.0, id.device
            )));
        }
        s.calls.push(Call::NewBlas(id));
        Ok(BlasRef(st.0))
    }

    fn new_event(&self, d: &FakeDevice) -> Result<EventRef, Error> {
        let mut s = self.lock();
        let index = s.counts[d.0].1;
        s.counts[d.0].1 += 1;
        let id = FakeEvent { device: d.0, index };
        s.events.push(EventState {
            id,
            at: None,
            rec: None,
            vc: Vec::new(),
        });
        s.calls.push(Call::NewEvent(id));
        Ok(EventRef(s.events.len() - 1))
    }

    fn record(&self, e: &EventRef, st: &StreamRef) -> Result<(), Error> {
        let mut s = self.lock();
        let (event, stream) = (s.events[e.0].id, s.streams[st.0].id);
        if event.device != stream.device {
            return Err(s.fault(format!(
                "event {} of gpu{} recorded on stream {} of gpu{}",
                event.index, event.device, stream.index, stream.device
            )));
        }
        let pos = s.step(st.0);
        let host = s.host_ns;
        let sst = &mut s.streams[st.0];
        sst.clock = sst.clock.max(host);
        let (at, vc) = (sst.clock, sst.vc.clone());
        let ev = &mut s.events[e.0];
        ev.at = Some(at);
        ev.rec = Some((st.0, pos));
        ev.vc = vc;
        s.calls.push(Call::Record {
            event,
            stream,
            at_ns: at,
        });
        Ok(())
    }

    fn wait(&self, st: &StreamRef, e: &EventRef) -> Result<(), Error> {
        let mut s = self.lock();
        let (event, stream, at) = (s.events[e.0].id, s.streams[st.0].id, s.events[e.0].at);
        s.calls.push(Call::Wait {
            stream,
            event,
            until_ns: at,
        });
        match at {
            Some(t) => {
                let vc = s.events[e.0].vc.clone();
                let sst = &mut s.streams[st.0];
                sst.clock = sst.clock.max(t);
                merge(&mut sst.vc, &vc);
                Ok(())
            }
            None => Err(s.fault(format!(
                "stream {} of gpu{} waits on event {} of gpu{}, never recorded",
                stream.index, stream.device, event.index, event.device
            ))),
        }
    }

    fn synchronize(&self, st: &StreamRef) -> Result<(), Error> {
        let mut s = self.lock();
        let clock = s.streams[st.0].clock;
        s.host_ns = s.host_ns.max(clock);
        let vc = s.streams[st.0].vc.clone();
        merge(&mut s.host_vc, &vc);
        let (stream, host_ns) = (s.streams[st.0].id, s.host_ns);
        s.calls.push(Call::Synchronize { stream, host_ns });
        Ok(())
    }

    fn elapsed_ms(&self, from: &EventRef, to: &EventRef) -> Result<f32, Error> {
        let mut s = self.lock();
        let (ida, at_a) = (s.events[from.0].id, s.events[from.0].at);
        let (idb, at_b) = (s.events[to.0].id, s.events[to.0].at);
        s.calls.push(Call::Elapsed { from: ida, to: idb });
        // Completed as far as the host knows: it has synchronised past the record.
        let seen = |e: usize| {
            s.events[e]
                .rec
                .is_some_and(|(st, pos)| clock(&s.host_vc, st) >= pos)
        };
        let done = seen(from.0) && seen(to.0);
        match (at_a, at_b) {
            (Some(x), Some(y)) if ida.device == idb.device && done => {
                Ok(((y as f64 - x as f64) / 1e6) as f32)
            }
            (Some(_), Some(_)) if ida.device != idb.device => Err(s.fault(format!(
                "time between events of gpu{} and gpu{}",
                ida.device, idb.device
            ))),
            _ => Err(s.fault(format!(
                "time between events {} and {} of gpu{} read before both completed",
                ida.index, idb.index, ida.device
            ))),
        }
    }

    fn alloc(&self, d: &FakeDevice, st: &StreamRef, bytes: u64) -> Result<FakeBuffer, Error> {
        let mut s = self.lock();
        let stream = s.streams[st.0].id;
        if stream.device != d.0 {
            return Err(s.fault(format!(
                "memory of gpu{} allocated on a stream of gpu{}",
                d.0, stream.device
            )));
        }
        if s.used[d.0].saturating_add(bytes) > s.gpu.memory_bytes {
            return Err(Error::Cuda {
                context: "allocating device memory".into(),
                message: "CUDA_ERROR_OUT_OF_MEMORY (fake)".into(),
            });
        }
        s.used[d.0] += bytes;
        let base = s.new_alloc(Some(d.0), Some(st.0), bytes);
        s.calls.push(Call::Alloc {
            device: d.0,
            stream,
            bytes,
        });
        Ok(FakeBuffer {
            base,
            len: bytes,
            state: self.state.clone(),
        })
    }

    fn buffer_ptr(&self, b: &FakeBuffer) -> u64 {
        b.base
    }

    fn buffer_len(&self, b: &FakeBuffer) -> u64 {
        b.len
    }

    fn alloc_pinned(&self, _d: &FakeDevice, bytes: u64) -> Result<FakeBuffer, Error> {
        let mut s = self.lock();
        let base = s.new_alloc(None, None, bytes);
        s.calls.push(Call::AllocPinned { bytes });
        Ok(FakeBuffer {
            base,
            len: bytes,
            state: self.state.clone(),
        })
    }

    fn pinned_ptr(&self, h: &FakeBuffer) -> Result<usize, Error> {
        usize::try_from(h.base).map_err(|_| Error::Internal("a 32-bit host".into()))
    }

    fn pinned_len(&self, h: &FakeBuffer) -> u64 {
        h.len
    }

    unsafe fn h2d(&self, st: &StreamRef, dst: u64, src: usize, bytes: u64) -> Result<(), Error> {
        let mut s = self.lock();
        let dev = s.streams[st.0].id.device;
        let (pinned, slot) = s.enqueue_host_copy(st.0, src as u64, bytes);
        let (r, w) = (s.access(st.0, slot, false), s.access(st.0, slot, true));
        s.touch(
            &r,
            src as u64,
            bytes,
            None,
            "a host-to-device copy's source",
        )?;
        s.touch(
            &w,
            dst,
            bytes,
            Some(dev),
            "a host-to-device copy's destination",
        )?;
        s.push_work(st.0, WorkKind::H2D { bytes, pinned }, slot);
        Ok(())
    }

    unsafe fn d2h(&self, st: &StreamRef, dst: usize, src: u64, bytes: u64) -> Result<(), Error> {
        let mut s = self.lock();
        let dev = s.streams[st.0].id.device;
        let (pinned, slot) = s.enqueue_host_copy(st.0, dst as u64, bytes);
        let (r, w) = (s.access(st.0, slot, false), s.access(st.0, slot, true));
        s.touch(&r, src, bytes, Some(dev), "a device-to-host copy's source")?;
        s.touch(
            &w,
            dst as u64,
            bytes,
            None,
            "a device-to-host copy's destination",
        )?;
        s.push_work(st.0, WorkKind::D2H { bytes, pinned }, slot);
        Ok(())
    }

    unsafe fn peer(
        &self,
        st: &StreamRef,
        from: &FakeDevice,
        src: u64,
        to: &FakeDevice,
        dst: u64,
        bytes: u64,
    ) -> Result<(), Error> {
        let mut s = self.lock();
        let dev = s.streams[st.0].id.device;
        if dev != from.0 {
            return Err(s.fault(format!(
                "a copy from gpu{} issued on a stream of gpu{dev}",
                from.0
            )));
        }
        let rate = if from.0 == to.0 {
            s.gpu.memory_bytes_per_s / 2.0
        } else {
            s.gpu.peer_bytes_per_s
        };
        let ns = s.ns(bytes as f64 / rate);
        let slot = s.enqueue(st.0, ns);
        let (r, w) = (s.access(st.0, slot, false), s.access(st.0, slot, true));
        s.touch(&r, src, bytes, Some(from.0), "a device copy's source")?;
        s.touch(&w, dst, bytes, Some(to.0), "a device copy's destination")?;
        s.push_work(st.0, WorkKind::Peer { bytes, to: to.0 }, slot);
        Ok(())
    }

    fn spin(&self, d: &FakeDevice, st: &StreamRef, ns: u64) -> Result<(), Error> {
        let mut s = self.lock();
        s.check_stream(d, st, "the head-start kernel")?;
        let slot = s.enqueue(st.0, ns);
        s.push_work(st.0, WorkKind::Spin { ns }, slot);
        Ok(())
    }

    unsafe fn fill(
        &self,
        d: &FakeDevice,
        st: &StreamRef,
        dt: usize,
        ptr: u64,
        n: u64,
        _seed: u64,
        _scale: f32,
    ) -> Result<(), Error> {
        if n == 0 {
            return Ok(());
        }
        let mut s = self.lock();
        s.check_stream(d, st, "the fill kernel")?;
        let bytes = n * DType::ALL[dt].bytes();
        let ns = s.kernel_ns(0.0, bytes as f64);
        let slot = s.enqueue(st.0, ns);
        let w = s.access(st.0, slot, true);
        s.touch(&w, ptr, bytes, Some(d.0), "the fill kernel")?;
        s.push_work(st.0, WorkKind::Fill { bytes }, slot);
        Ok(())
    }

    unsafe fn gemm(
        &self,
        blas: &BlasRef,
        dtype: DType,
        m: usize,
        n: usize,
        k: usize,
        batch: usize,
        a: u64,
        b: u64,
        c: u64,
    ) -> Result<(), Error> {
        if m == 0 || n == 0 || batch == 0 {
            return Ok(());
        }
        let mut s = self.lock();
        let st = blas.0;
        let dev = s.streams[st].id.device;
        let es = dtype.bytes();
        let (m64, n64, k64, b64) = (m as u64, n as u64, k as u64, batch as u64);
        let (ab, bb, cb) = (
            b64 * m64 * k64 * es,
            b64 * k64 * n64 * es,
            b64 * m64 * n64 * es,
        );
        let flops = 2.0 * (b64 * m64 * n64) as f64 * k as f64;
        let ns = s.kernel_ns(flops, (ab + bb + cb) as f64);
        let slot = s.enqueue(st, ns);
        let (r, w) = (s.access(st, slot, false), s.access(st, slot, true));
        s.touch(&r, a, ab, Some(dev), "a GEMM's A")?;
        s.touch(&r, b, bb, Some(dev), "a GEMM's B")?;
        s.touch(&w, c, cb, Some(dev), "a GEMM's C")?;
        let kind = WorkKind::Gemm {
            m,
            n,
            k,
            batch,
            dtype,
        };
        s.push_work(st, kind, slot);
        Ok(())
    }

    unsafe fn attention(
        &self,
        d: &FakeDevice,
        st: &StreamRef,
        dt: usize,
        shape: &AttentionShape,
        q: u64,
        kv: u64,
        out: u64,
        ws: u64,
        ws_elems: u64,
    ) -> Result<(), Error> {
        let sh = *shape;
        if sh.batch == 0 || sh.q_len == 0 || sh.q_heads == 0 || sh.head_dim == 0 {
            return Ok(());
        }
        if sh.kv_heads == 0 || !sh.q_heads.is_multiple_of(sh.kv_heads) {
            return Err(Error::Unsupported(format!(
                "attention with {} query heads and {} key/value heads",
                sh.q_heads, sh.kv_heads
            )));
        }
        if sh.head_dim > 256 {
            return Err(Error::Unsupported(format!(
                "attention head dimension {} (the CUDA kernels support up to 256)",
                sh.head_dim
            )));
        }
        let mut s = self.lock();
        s.check_stream(d, st, "attention")?;
        let need = attention_workspace(&sh, s.gpu.sms);
        if need > ws_elems {
            return Err(Error::Internal("attention workspace too small".into()));
        }
        let dtype = DType::ALL[dt];
        let es = dtype.bytes();
        let (qb, kvb) = (sh.q_elems() as u64 * es, sh.kv_elems() as u64 * es);
        let flops =
            4.0 * (sh.batch * sh.q_heads * sh.q_len) as f64 * (sh.kv_len * sh.head_dim) as f64;
        let ns = s.kernel_ns(flops, (2 * qb + kvb) as f64);
        let slot = s.enqueue(st.0, ns);
        let (r, w) = (s.access(st.0, slot, false), s.access(st.0, slot, true));
        s.touch(&r, q, qb, Some(d.0), "attention's Q")?;
        s.touch(&r, kv, kvb, Some(d.0), "attention's K,V")?;
        s.touch(&w, out, qb, Some(d.0), "attention's output")?;
        s.touch(&w, ws, need * 4, Some(d.0), "attention's workspace")?;
        s.push_work(st.0, WorkKind::Attention { shape: sh, dtype }, slot);
        Ok(())
    }

    unsafe fn axpb(
        &self,
        d: &FakeDevice,
        st: &StreamRef,
        dt: usize,
        strided: &Strided,
        src: u64,
        dst: u64,
        _a: f32,
        _c: f32,
    ) -> Result<(), Error> {
        let x = strided;
        let total = (x.outer as u64) * (x.middle as u64) * (x.inner as u64);
        if total == 0 {
            return Ok(());
        }
        let mut s = self.lock();
        s.check_stream(d, st, "the elementwise kernel")?;
        let dtype = DType::ALL[dt];
        let es = dtype.bytes();
        let (se, de) = x.extents();
        let ns = s.kernel_ns(0.0, (2 * total * es) as f64);
        let slot = s.enqueue(st.0, ns);
        let (r, w) = (s.access(st.0, slot, false), s.access(st.0, slot, true));
        // The extents from element 0 of each buffer: what the kernel may touch.
        s.touch(
            &r,
            src,
            se as u64 * es,
            Some(d.0),
            "the elementwise kernel's source",
        )?;
        s.touch(
            &w,
            dst,
            de as u64 * es,
            Some(d.0),
            "the elementwise kernel's destination",
        )?;
        s.push_work(
            st.0,
            WorkKind::Elementwise {
                elems: total,
                dtype,
            },
            slot,
        );
        Ok(())
    }
}

impl State {
    /// Queues a copy of `bytes` between host memory at `host` and a device on stream `st`, at
    /// the pinned or the pageable rate as `host` is: whether it is pinned, and the copy's slot.
    fn enqueue_host_copy(&mut self, st: usize, host: u64, bytes: u64) -> (bool, Slot) {
        let pinned = self.live_pinned(host);
        let rate = if pinned {
            self.gpu.pinned_bytes_per_s
        } else {
            self.gpu.pageable_bytes_per_s
        };
        let ns = self.ns(bytes as f64 / rate);
        (pinned, self.enqueue(st, ns))
    }

    /// Whether `ptr` lies in live pinned memory of the fake.
    fn live_pinned(&self, ptr: u64) -> bool {
        self.live
            .range(..=ptr)
            .next_back()
            .is_some_and(|(_, a)| a.device.is_none() && ptr < a.base + a.len.max(1))
    }

    fn check_stream(&mut self, d: &FakeDevice, st: &StreamRef, what: &str) -> Result<(), Error> {
        let id = self.streams[st.0].id;
        if id.device != d.0 {
            return Err(self.fault(format!(
                "{what} of gpu{} launched on stream {} of gpu{}",
                d.0, id.index, id.device
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn driver() -> (FakeDriver, FakeLog) {
        let state = Arc::new(Mutex::new(State::new(FakeGpu {
            fixed_ns: 0,
            ..FakeGpu::default()
        })));
        (
            FakeDriver {
                state: state.clone(),
            },
            FakeLog(state),
        )
    }

    /// One stream writes a buffer with a copy while another reads it with a kernel: a hazard
    /// unless the reader waits on an event recorded after the copy.
    #[test]
    fn a_write_overlapping_another_streams_read_is_a_hazard_unless_an_event_orders_them() {
        for ordered in [false, true] {
            let (mut drv, log) = driver();
            let d = drv.open(0).unwrap();
            let (copy, compute) = (drv.new_stream(&d).unwrap(), drv.new_stream(&d).unwrap());
            let done = drv.new_event(&d).unwrap();
            let buf = drv.alloc(&d, &copy, 1 << 20).unwrap();
            let host = drv.alloc_pinned(&d, 1 << 20).unwrap();
            let p = drv.buffer_ptr(&buf);
            let out = drv.alloc(&d, &compute, 1 << 20).unwrap();
            let hp = drv.pinned_ptr(&host).unwrap();
            // SAFETY: fake addresses of live fake allocations, never dereferenced.
            unsafe { drv.h2d(&copy, p, hp, 1 << 20) }.unwrap();
            drv.record(&done, &copy).unwrap();
            if ordered {
                drv.wait(&compute, &done).unwrap();
            }
            let strided = Strided::contiguous(1 << 19);
            // SAFETY: as above.
            unsafe { drv.axpb(&d, &compute, 0, &strided, p, drv.buffer_ptr(&out), 1.0, 0.0) }
                .unwrap();
            let h = log.hazards();
            assert_eq!(h.is_empty(), ordered, "{h:?}");
            if !ordered {
                assert!(h[0].contains("a write on gpu0 stream 0"), "{h:?}");
                assert!(h[0].contains("a read on gpu0 stream 1"), "{h:?}");
            }
            assert!(log.faults().is_empty(), "{:?}", log.faults());
            let w = log.work();
            assert_eq!(w.len(), 2);
            // 1 MiB at 25 GB/s.
            assert_eq!(w[0].end_ns - w[0].start_ns, 41_944);
            assert_eq!(w[1].start_ns, if ordered { w[0].end_ns } else { 0 });
        }
    }

    /// A buffer dropped (freed in its stream's order) while another stream still reads it.
    #[test]
    fn freeing_a_buffer_another_stream_still_reads_is_a_hazard() {
        for synced in [false, true] {
            let (mut drv, log) = driver();
            let d = drv.open(0).unwrap();
            let (owner, reader) = (drv.new_stream(&d).unwrap(), drv.new_stream(&d).unwrap());
            let buf = drv.alloc(&d, &owner, 4096).unwrap();
            let host = drv.alloc_pinned(&d, 4096).unwrap();
            let hp = drv.pinned_ptr(&host).unwrap();
            // SAFETY: fake addresses of live fake allocations, never dereferenced.
            unsafe { drv.d2h(&reader, hp, drv.buffer_ptr(&buf), 4096) }.unwrap();
            if synced {
                drv.synchronize(&reader).unwrap();
            }
            drop(buf);
            let h = log.hazards();
            assert_eq!(h.is_empty(), synced, "{h:?}");
            if !synced {
                assert!(
                    h[0].contains("without waiting for a read on gpu0 stream 1"),
                    "{h:?}"
                );
            }
        }
    }

    #[test]
    fn out_of_bounds_and_stale_addresses_are_faults_and_fail_the_deferred_check() {
        let (mut drv, log) = driver();
        let d = drv.open(0).unwrap();
        let st = drv.new_stream(&d).unwrap();
        let buf = drv.alloc(&d, &st, 1000).unwrap();
        let p = drv.buffer_ptr(&buf);
        assert!(drv.check_err(&d).is_ok());
        // SAFETY: fake addresses, never dereferenced.
        let over = unsafe { drv.fill(&d, &st, DType::Fp16.index(), p + 2, 500, 0, 1.0) };
        assert!(over.is_err());
        drop(buf);
        // SAFETY: as above.
        let stale = unsafe { drv.fill(&d, &st, DType::Fp16.index(), p, 1, 0, 1.0) };
        assert!(stale.is_err());
        let f = log.faults();
        assert_eq!(f.len(), 2, "{f:?}");
        assert!(f.iter().any(|m| m.contains("overrun")), "{f:?}");
        assert!(f.iter().any(|m| m.contains("no live allocation")), "{f:?}");
        assert!(drv.check_err(&d).is_err());
    }

    #[test]
    fn waits_on_unrecorded_events_and_early_elapsed_reads_are_faults() {
        let (mut drv, log) = driver();
        let d = drv.open(0).unwrap();
        let st = drv.new_stream(&d).unwrap();
        let (a, b) = (drv.new_event(&d).unwrap(), drv.new_event(&d).unwrap());
        assert!(drv.wait(&st, &a).is_err());
        drv.record(&a, &st).unwrap();
        drv.spin(&d, &st, 5_000).unwrap();
        drv.record(&b, &st).unwrap();
        assert!(drv.elapsed_ms(&a, &b).is_err(), "read before synchronising");
        drv.synchronize(&st).unwrap();
        assert_eq!(drv.elapsed_ms(&a, &b).unwrap(), 0.005);
        assert_eq!(log.faults().len(), 2, "{:?}", log.faults());
    }
}
