//! The CUDA executor: buffers, placement of schedule streams on CUDA streams, the stream threads
//! and the timing events.

use std::time::Instant;

use kvplan_vocab::DType;
use kvplan_vocab::schedule::{HostMemory, OpId, OpKind, Schedule, StreamId, StreamKind};
use kvplan_vocab::timeline::{Source, Span, Timeline};

use super::api::Driver;
use super::device::Dev;
use super::driver::{check_ordinal, guarded, internal};
use super::launch::attention_workspace;
use super::real::Cudarc;
use crate::backend::{BackendKind, DeviceInfo, ExecOptions, Executor};
use crate::data;
use crate::error::Error;
use crate::kernel::Strided;
use crate::sched::{self, Progress, StreamNeeds, Worker};

/// Most ops one schedule may have (two timing events each).
pub(crate) const MAX_OPS: usize = 2_000_000;

/// Device memory left free for cuBLAS workspaces, modules and the driver.
const DEVICE_MARGIN: u64 = 256 << 20;

/// A device allocation and the schedule device it lives on.
struct DevBuf<D: Driver> {
    buf: D::Buffer,
    device: usize,
}

/// How a device buffer is initialised.
#[derive(Clone, Copy)]
enum Fill {
    /// Left as allocated (outputs, copy buffers, workspaces).
    None,
    /// Seeded values of the dtype of index `dt` ([`DType::index`]) in `[-scale, scale)`.
    Random { dt: usize, scale: f32 },
}

/// What a buffer slot must hold in one run.
#[derive(Clone, Copy)]
struct Want {
    bytes: u64,
    device: usize,
    /// Pool slot of the stream that allocates (and later frees) it.
    slot: usize,
    fill: Fill,
}

/// Scratch buffers of one schedule stream, kept across runs.
struct StreamBufs<D: Driver> {
    /// Device side of copies; source of peer sends.
    dev_copy: Option<DevBuf<D>>,
    /// Receiving buffer of peer sends (on the target device).
    peer_dst: Option<DevBuf<D>>,
    /// GEMM A, B, C per dtype.
    gemm: [[Option<DevBuf<D>>; 3]; DType::COUNT],
    /// Attention Q, O, KV, workspace per dtype.
    attn: [[Option<DevBuf<D>>; 4]; DType::COUNT],
    /// Elementwise source and destination (fp16).
    elem: [Option<DevBuf<D>>; 2],
    pinned: Option<D::Pinned>,
    pageable: Vec<u8>,
}

impl<D: Driver> Default for StreamBufs<D> {
    fn default() -> Self {
        StreamBufs {
            dev_copy: None,
            peer_dst: None,
            gemm: Default::default(),
            attn: Default::default(),
            elem: Default::default(),
            pinned: None,
            pageable: Vec::new(),
        }
    }
}

const SLOTS: usize = 2 + 9 + 12 + 2;

impl<D: Driver> StreamBufs<D> {
    fn slots(&mut self) -> [&mut Option<DevBuf<D>>; SLOTS] {
        let [g0, g1, g2] = &mut self.gemm;
        let [a0, a1, a2] = &mut self.attn;
        let [e0, e1] = &mut self.elem;
        let [g00, g01, g02] = g0;
        let [g10, g11, g12] = g1;
        let [g20, g21, g22] = g2;
        let [a00, a01, a02, a03] = a0;
        let [a10, a11, a12, a13] = a1;
        let [a20, a21, a22, a23] = a2;
        [
            &mut self.dev_copy,
            &mut self.peer_dst,
            g00,
            g01,
            g02,
            g10,
            g11,
            g12,
            g20,
            g21,
            g22,
            a00,
            a01,
            a02,
            a03,
            a10,
            a11,
            a12,
            a13,
            a20,
            a21,
            a22,
            a23,
            e0,
            e1,
        ]
    }

    /// What each slot (in [`StreamBufs::slots`] order) must hold for `n`.
    fn wants(
        n: &StreamNeeds,
        device: usize,
        slot: usize,
        peer: Option<(usize, usize)>,
    ) -> [Option<Want>; SLOTS] {
        let want = |bytes: u64, fill: Fill| {
            (bytes > 0).then_some(Want {
                bytes,
                device,
                slot,
                fill,
            })
        };
        let mut w: [Option<Want>; SLOTS] = [None; SLOTS];
        w[0] = want(n.copy, Fill::None);
        if let Some((to, to_slot)) = peer {
            w[1] = (n.copy > 0).then_some(Want {
                bytes: n.copy,
                device: to,
                slot: to_slot,
                fill: Fill::None,
            });
        }
        for (dt, dtype) in DType::ALL.into_iter().enumerate() {
            let es = dtype.bytes();
            let g = n.gemm[dt];
            let b_scale = 1.0 / (g.k_max.max(1) as f32).sqrt();
            w[2 + 3 * dt] = want(g.a.saturating_mul(es), Fill::Random { dt, scale: 1.0 });
            w[3 + 3 * dt] = want(g.b.saturating_mul(es), Fill::Random { dt, scale: b_scale });
            w[4 + 3 * dt] = want(g.c.saturating_mul(es), Fill::None);
            let a = n.attn[dt];
            w[11 + 4 * dt] = want(a.q.saturating_mul(es), Fill::Random { dt, scale: 1.0 });
            w[12 + 4 * dt] = want(a.q.saturating_mul(es), Fill::None);
            w[13 + 4 * dt] = want(a.kv.saturating_mul(es), Fill::Random { dt, scale: 1.0 });
            w[14 + 4 * dt] = want(a.ws.saturating_mul(4), Fill::None);
        }
        // The elementwise kernel reads half of its bytes and writes the other half, as fp16.
        let half = n.elementwise / 2;
        w[23] = want(
            half,
            Fill::Random {
                dt: DType::Fp16.index(),
                scale: 1.0,
            },
        );
        w[24] = want(half, Fill::None);
        w
    }
}

/// Raw addresses of one stream's buffers for its worker thread.
#[derive(Clone, Copy, Default)]
struct Ptrs {
    dev_copy: u64,
    peer_dst: u64,
    gemm: [[u64; 3]; DType::COUNT],
    attn: [[u64; 4]; DType::COUNT],
    ws_elems: [u64; DType::COUNT],
    elem: [u64; 2],
    /// Host addresses (as integers, so the struct is `Send`).
    pinned: usize,
    pageable: usize,
}

impl Ptrs {
    fn of<D: Driver>(drv: &D, b: &mut StreamBufs<D>) -> Result<Self, Error> {
        let p = |s: &Option<DevBuf<D>>| s.as_ref().map_or(0, |d| drv.buffer_ptr(&d.buf));
        let mut out = Ptrs {
            dev_copy: p(&b.dev_copy),
            peer_dst: p(&b.peer_dst),
            elem: [p(&b.elem[0]), p(&b.elem[1])],
            pageable: b.pageable.as_mut_ptr() as usize,
            ..Ptrs::default()
        };
        for dt in 0..DType::COUNT {
            for r in 0..3 {
                out.gemm[dt][r] = p(&b.gemm[dt][r]);
            }
            for r in 0..4 {
                out.attn[dt][r] = p(&b.attn[dt][r]);
            }
            out.ws_elems[dt] = b.attn[dt][3]
                .as_ref()
                .map_or(0, |d| drv.buffer_len(&d.buf) / 4);
        }
        if let Some(h) = &b.pinned {
            out.pinned = drv.pinned_ptr(h)?;
        }
        Ok(out)
    }
}

/// Where one schedule stream runs.
#[derive(Clone, Copy)]
struct Placement {
    device: usize,
    slot: usize,
    /// Peer target (device, its pool slot 0) of a peer stream.
    peer: Option<(usize, usize)>,
}

/// The CUDA executor, on the real driver (cudarc) or on another [`Driver`] (the fake).
pub(crate) struct CudaExecutor<D: Driver = Cudarc> {
    info: DeviceInfo,
    options: ExecOptions,
    /// The driver (for cudarc: the kernels compiled per compute capability).
    drv: D,
    /// Schedule device `i` is `devices[i]` (ordinal `options.device + i`), opened on demand.
    devices: Vec<Dev<D>>,
    /// Scratch buffers per schedule stream index.
    cache: Vec<StreamBufs<D>>,
    /// (from, to) device pairs whose peer access has been handled.
    peers: Vec<(usize, usize)>,
}

impl CudaExecutor<Cudarc> {
    /// Opens device `options.device`: checks the libraries, the device count and the ordinal,
    /// creates the context and compiles the kernels.
    pub fn open(options: &ExecOptions) -> Result<Self, Error> {
        let drv = Cudarc::load()?;
        guarded(|| Self::with_driver(drv, options))
    }
}

impl<D: Driver> CudaExecutor<D> {
    /// Opens device `options.device` of `drv`: checks the device count and the ordinal, opens
    /// the device.
    pub(crate) fn with_driver(mut drv: D, options: &ExecOptions) -> Result<Self, Error> {
        let count = drv.device_count()?;
        check_ordinal(options.device, count)?;
        let dev = Dev::open(&mut drv, options.device)?;
        let info = drv.info(&dev.dev)?;
        Ok(CudaExecutor {
            info,
            options: options.clone(),
            drv,
            devices: vec![dev],
            cache: Vec::new(),
            peers: Vec::new(),
        })
    }

    fn ensure_devices(&mut self, n: usize) -> Result<(), Error> {
        if self.devices.len() >= n {
            return Ok(());
        }
        let count = self.drv.device_count()?;
        let avail = count.saturating_sub(self.options.device);
        if avail < n {
            return Err(Error::Unsupported(format!(
                "the schedule uses {n} devices but only {avail} CUDA device(s) are available from ordinal {} ({count} in all)",
                self.options.device
            )));
        }
        while self.devices.len() < n {
            let d = Dev::open(&mut self.drv, self.options.device + self.devices.len())?;
            self.devices.push(d);
        }
        Ok(())
    }

    fn enable_peer(&mut self, from: usize, to: usize) -> Result<(), Error> {
        if from == to || self.peers.contains(&(from, to)) {
            return Ok(());
        }
        self.drv
            .enable_peer(&self.devices[from].dev, &self.devices[to].dev)?;
        self.peers.push((from, to));
        Ok(())
    }

    /// Checks memory, then (re)allocates and fills every buffer the schedule needs.
    fn prepare(&mut self, needs: &[StreamNeeds], place: &[Placement]) -> Result<(), Error> {
        if self.cache.len() < needs.len() {
            self.cache.resize_with(needs.len(), StreamBufs::default);
        }
        let n_dev = self.devices.len();
        let wants: Vec<[Option<Want>; SLOTS]> = needs
            .iter()
            .zip(place)
            .map(|(n, p)| StreamBufs::<D>::wants(n, p.device, p.slot, p.peer))
            .collect();
        // Device memory after this run's allocations, against what is free plus what we hold.
        let mut after = vec![0u64; n_dev];
        let mut held = vec![0u64; n_dev];
        let mut host_after = 0u64;
        let mut host_held = 0u64;
        for (i, bufs) in self.cache.iter_mut().enumerate() {
            let w = wants.get(i);
            let n = needs.get(i);
            for (j, slot) in bufs.slots().into_iter().enumerate() {
                let cur = slot
                    .as_ref()
                    .map(|d| (self.drv.buffer_len(&d.buf), d.device));
                if let Some((bytes, dev)) = cur {
                    held[dev] = held[dev].saturating_add(bytes);
                }
                match (w.and_then(|w| w[j]), cur) {
                    (Some(want), Some((bytes, dev)))
                        if dev == want.device && bytes >= want.bytes =>
                    {
                        after[dev] = after[dev].saturating_add(bytes);
                    }
                    (Some(want), _) => {
                        after[want.device] = after[want.device].saturating_add(want.bytes)
                    }
                    (None, Some((bytes, dev))) => after[dev] = after[dev].saturating_add(bytes),
                    (None, None) => {}
                }
            }
            let pinned = bufs.pinned.as_ref().map_or(0, |p| self.drv.pinned_len(p));
            host_held = host_held.saturating_add(pinned + bufs.pageable.len() as u64);
            let (want_pinned, want_pageable) = n.map_or((0, 0), |n| (n.pinned, n.pageable));
            host_after = host_after
                .saturating_add(pinned.max(want_pinned))
                .saturating_add((bufs.pageable.len() as u64).max(want_pageable));
        }
        for (d, dev) in self.devices.iter().enumerate() {
            let free = self.drv.free_memory(&dev.dev)?;
            let have = free + held[d];
            if after[d].saturating_add(DEVICE_MARGIN) > have {
                return Err(Error::OutOfMemory {
                    what: "device memory",
                    need: after[d].saturating_add(DEVICE_MARGIN),
                    have,
                });
            }
        }
        if let Some(avail) = sched::host_available_bytes()
            && host_after > host_held
            && host_after - host_held > avail
        {
            return Err(Error::OutOfMemory {
                what: "host memory",
                need: host_after,
                have: avail + host_held,
            });
        }
        // Allocate and fill.
        let seed = self.options.seed;
        let drv = &self.drv;
        for (i, (bufs, w)) in self.cache.iter_mut().zip(&wants).enumerate() {
            for (j, (slot, want)) in bufs.slots().into_iter().zip(w).enumerate() {
                let Some(want) = *want else { continue };
                if slot.as_ref().is_some_and(|d| {
                    d.device == want.device && drv.buffer_len(&d.buf) >= want.bytes
                }) {
                    continue;
                }
                *slot = None;
                let dev = &self.devices[want.device];
                let stream = &dev.streams[want.slot];
                let buf = drv.alloc(&dev.dev, stream, want.bytes)?;
                if let Fill::Random { dt, scale } = want.fill {
                    let n = want.bytes / DType::ALL[dt].bytes();
                    let s = data::derive(seed, (i * SLOTS + j) as u64);
                    // SAFETY: `buf` was just allocated on this device with `want.bytes` bytes,
                    // `n` elements of the dtype.
                    unsafe { drv.fill(&dev.dev, stream, dt, drv.buffer_ptr(&buf), n, s, scale) }?;
                }
                *slot = Some(DevBuf {
                    buf,
                    device: want.device,
                });
            }
            let (pinned, pageable) = needs.get(i).map_or((0, 0), |n| (n.pinned, n.pageable));
            if pinned > 0
                && bufs
                    .pinned
                    .as_ref()
                    .is_none_or(|p| drv.pinned_len(p) < pinned)
            {
                bufs.pinned = None;
                // Every page is touched now; a copy's bytes are bytes.
                bufs.pinned = Some(drv.alloc_pinned(&self.devices[place[i].device].dev, pinned)?);
            }
            if (bufs.pageable.len() as u64) < pageable {
                bufs.pageable = Vec::new();
                bufs.pageable = vec![0xA5; pageable as usize];
            }
        }
        for dev in &self.devices {
            for s in &dev.streams {
                drv.synchronize(s)?;
            }
        }
        Ok(())
    }

    fn run_inner(&mut self, schedule: &Schedule) -> Result<Timeline, Error> {
        schedule.validate()?;
        if schedule.len() > MAX_OPS {
            return Err(Error::Unsupported(format!(
                "a schedule of {} ops (the CUDA backend times at most {MAX_OPS} per run)",
                schedule.len()
            )));
        }
        let streams = schedule.streams();
        let n_dev = streams
            .iter()
            .map(|s| match s.kind {
                StreamKind::Peer { to } => usize::from(s.device.max(to)) + 1,
                _ => usize::from(s.device) + 1,
            })
            .max()
            .unwrap_or(1);
        self.ensure_devices(n_dev)?;
        // Pool slot of each stream on its device.
        let mut next_slot = vec![0usize; n_dev];
        let mut place: Vec<Placement> = Vec::with_capacity(streams.len());
        for s in streams {
            let d = usize::from(s.device);
            place.push(Placement {
                device: d,
                slot: next_slot[d],
                peer: None,
            });
            next_slot[d] += 1;
        }
        for (d, &n) in next_slot.iter().enumerate() {
            self.devices[d].ensure_streams(&self.drv, n.max(1))?;
        }
        for (i, s) in streams.iter().enumerate() {
            match s.kind {
                StreamKind::Compute => {
                    self.devices[place[i].device].ensure_blas(&self.drv, place[i].slot)?;
                }
                StreamKind::Peer { to } => {
                    place[i].peer = Some((usize::from(to), 0));
                    self.enable_peer(place[i].device, usize::from(to))?;
                }
                StreamKind::H2D | StreamKind::D2H => {}
            }
        }
        let sms: Vec<u32> = self.devices.iter().map(|d| self.drv.sms(&d.dev)).collect();
        let needs = sched::needs(schedule, |s, shape| {
            attention_workspace(shape, sms[usize::from(streams[s].device)])
        })?;
        self.prepare(&needs, &place)?;

        // Timing events: op -> index into its device's pool.
        let ops = schedule.ops();
        let mut per_dev = vec![0u32; n_dev];
        let local: Vec<u32> = ops
            .iter()
            .map(|o| {
                let d = place[o.stream.index()].device;
                per_dev[d] += 1;
                per_dev[d] - 1
            })
            .collect();
        for (d, &n) in per_dev.iter().enumerate() {
            self.devices[d].ensure_events(&self.drv, 2 * n as usize)?;
        }
        let mut per_stream = vec![0usize; streams.len()];
        for o in ops {
            per_stream[o.stream.index()] += 1;
        }
        let used: Vec<usize> = (0..streams.len()).filter(|&s| per_stream[s] > 0).collect();
        let mut ptrs = Vec::with_capacity(streams.len());
        for b in &mut self.cache[..streams.len()] {
            ptrs.push(Ptrs::of(&self.drv, b)?);
        }
        let head_start_ns = (schedule.len() as u64 * 5_000).clamp(100_000, 100_000_000);
        let mut progress = Progress::new(schedule.len());
        let (mut spans, mut host) = (Vec::new(), Vec::new());
        for run in 0..=self.options.warmup_runs {
            progress.reset();
            let measured = run == self.options.warmup_runs;
            let r = run_once(
                &self.drv,
                &self.devices,
                schedule,
                &place,
                &used,
                &local,
                &ptrs,
                &progress,
                head_start_ns,
                measured,
            )?;
            if measured {
                (spans, host) = r;
            }
        }
        for d in &self.devices {
            self.drv.check_err(&d.dev)?;
        }
        Ok(Timeline {
            source: Source::Measured {
                backend: BackendKind::Cuda.as_str().to_string(),
                device: self.info.name.clone(),
            },
            spans,
            host,
        })
    }
}

/// One run: reference events, the stream threads, synchronisation, and (if `measured`) the
/// device spans and the host's issue spans.
#[allow(clippy::too_many_arguments)]
fn run_once<D: Driver>(
    drv: &D,
    devices: &[Dev<D>],
    schedule: &Schedule,
    place: &[Placement],
    used: &[usize],
    local: &[u32],
    ptrs: &[Ptrs],
    progress: &Progress,
    head_start_ns: u64,
    measured: bool,
) -> Result<(Vec<Span>, Vec<Span>), Error> {
    if used.is_empty() {
        return Ok((Vec::new(), Vec::new()));
    }
    let stream_of = |s: usize| &devices[place[s].device].streams[place[s].slot];
    // Reference events: the lead (first used) stream of each device records its device's
    // reference; device 0's lead first spins to give the host a head start.
    let mut leads: Vec<Option<usize>> = vec![None; devices.len()];
    for &s in used {
        let d = place[s].device;
        if leads[d].is_none() {
            leads[d] = Some(s);
        }
    }
    let primary = place[used[0]].device;
    let lead = stream_of(leads[primary].expect("the primary device has a used stream"));
    drv.spin(&devices[primary].dev, lead, head_start_ns)?;
    let primary_ref = &devices[primary].reference;
    drv.bind(&devices[primary].dev)?;
    drv.record(primary_ref, lead)?;
    for (d, l) in leads.iter().enumerate() {
        if let Some(l) = *l
            && d != primary
        {
            let s = stream_of(l);
            drv.bind(&devices[d].dev)?;
            drv.wait(s, primary_ref)?;
            drv.record(&devices[d].reference, s)?;
        }
    }
    for &s in used {
        if leads[place[s].device] != Some(s) {
            let d = &devices[place[s].device];
            drv.bind(&d.dev)?;
            drv.wait(stream_of(s), &d.reference)?;
        }
    }

    let mut workers: Vec<CudaWorker<D>> = used
        .iter()
        .map(|&s| {
            let p = place[s];
            let dev = &devices[p.device];
            CudaWorker {
                stream_id: StreamId(s as u16),
                schedule,
                drv,
                dev: &dev.dev,
                stream: &dev.streams[p.slot],
                blas: dev.blas[p.slot].as_ref(),
                ptrs: ptrs[s],
                devices,
                place,
                local,
                waited: vec![0; place.len()],
                peer_dev: p.peer.map(|(to, _)| &devices[to].dev),
                host: Vec::new(),
            }
        })
        .collect();
    let issued = sched::drive(schedule, progress, &mut workers);
    let host = sched::spans_from(schedule.len(), workers.iter().map(|w| w.host.as_slice()));
    drop(workers);
    // Always wait for the device, also after a failure, before anything can be freed.
    let mut synced: Result<(), Error> = Ok(());
    for &s in used {
        if let Err(e) = drv.synchronize(stream_of(s))
            && synced.is_ok()
        {
            synced = Err(e);
        }
    }
    issued?;
    synced?;
    if !measured {
        return Ok((Vec::new(), Vec::new()));
    }
    let mut spans = Vec::with_capacity(schedule.len());
    let mut bound = usize::MAX;
    for (i, op) in schedule.ops().iter().enumerate() {
        let d = place[op.stream.index()].device;
        if bound != d {
            drv.bind(&devices[d].dev)?;
            bound = d;
        }
        let r = &devices[d].reference;
        let ev = &devices[d].events;
        let j = 2 * local[i] as usize;
        // All three events belong to this device's (current) context and have completed
        // (every stream was synchronised above).
        let start = f64::from(drv.elapsed_ms(r, &ev[j])?) * 1e-3;
        let end = f64::from(drv.elapsed_ms(r, &ev[j + 1])?) * 1e-3;
        let start = start.max(0.0);
        spans.push(Span {
            start,
            end: end.max(start),
        });
    }
    Ok((spans, host))
}

/// Issues one schedule stream's ops onto its CUDA stream.
struct CudaWorker<'a, D: Driver> {
    stream_id: StreamId,
    schedule: &'a Schedule,
    drv: &'a D,
    /// This stream's device.
    dev: &'a D::Device,
    stream: &'a D::Stream,
    blas: Option<&'a D::Blas>,
    ptrs: Ptrs,
    devices: &'a [Dev<D>],
    place: &'a [Placement],
    local: &'a [u32],
    /// Per stream: one past the latest op of that stream this stream already waits for.
    waited: Vec<u32>,
    /// Receiving device of a peer stream.
    peer_dev: Option<&'a D::Device>,
    /// (op, start, end) of the host's issue of every op issued (its waits on other streams,
    /// its two timing events and the launch or copy call), in stream order.
    host: Vec<(u32, Instant, Instant)>,
}

impl<D: Driver> CudaWorker<'_, D> {
    /// Issues `op`: waits on the other streams' ops it depends on, its start event, the op,
    /// its end event.
    fn issue_op(&mut self, op: OpId) -> Result<(), Error> {
        let me = self.stream_id.index();
        for d in self.schedule.deps(op) {
            let ds = self.schedule.ops()[d.index()].stream.index();
            if ds == me || self.waited[ds] > d.0 {
                continue;
            }
            // The dependency is marked, so its end event has been recorded in this run.
            self.drv.wait(self.stream, self.event(d.index(), true))?;
            self.waited[ds] = d.0 + 1;
        }
        let i = op.index();
        self.drv.record(self.event(i, false), self.stream)?;
        self.issue(&self.schedule.ops()[i].kind)?;
        self.drv.record(self.event(i, true), self.stream)
    }

    fn event(&self, op: usize, end: bool) -> &D::Event {
        let d = self.place[self.schedule.ops()[op].stream.index()].device;
        &self.devices[d].events[2 * self.local[op] as usize + usize::from(end)]
    }

    fn issue(&self, kind: &OpKind) -> Result<(), Error> {
        let (drv, cs) = (self.drv, self.stream);
        let p = &self.ptrs;
        match *kind {
            OpKind::H2D { bytes, host, .. } => {
                if bytes == 0 {
                    return Ok(());
                }
                let src = match host {
                    HostMemory::Pinned => p.pinned,
                    HostMemory::Pageable => p.pageable,
                };
                // SAFETY: `src` is a live host allocation (pinned buffer or Vec owned by the
                // executor for the whole run) and `dev_copy` a device allocation, both of at
                // least `bytes` bytes (sized from this schedule).
                unsafe { drv.h2d(cs, p.dev_copy, src, bytes) }
            }
            OpKind::D2H { bytes, host, .. } => {
                if bytes == 0 {
                    return Ok(());
                }
                let dst = match host {
                    HostMemory::Pinned => p.pinned,
                    HostMemory::Pageable => p.pageable,
                };
                // SAFETY: as for H2D, in the other direction; nothing else touches the host
                // buffer during the run.
                unsafe { drv.d2h(cs, dst, p.dev_copy, bytes) }
            }
            OpKind::PeerSend { bytes } => {
                if bytes == 0 {
                    return Ok(());
                }
                let to = self.peer_dev.unwrap_or(self.dev);
                // SAFETY: `dev_copy` (on this device) and `peer_dst` (on the receiving device)
                // are device allocations of at least `bytes` bytes, in live contexts.
                unsafe { drv.peer(cs, self.dev, p.dev_copy, to, p.peer_dst, bytes) }
            }
            // Quantised weights run as 16-bit GEMMs here (the executor has no quantised kernels).
            OpKind::Gemm {
                m,
                n,
                k,
                batch,
                dtype,
                ..
            } => {
                let blas = self
                    .blas
                    .ok_or_else(|| internal("a GEMM on a stream without a cuBLAS handle"))?;
                let g = p.gemm[dtype.index()];
                // SAFETY: A, B and C were sized from this stream's largest GEMM of the dtype.
                unsafe {
                    drv.gemm(
                        blas,
                        dtype,
                        m as usize,
                        n as usize,
                        k as usize,
                        batch as usize,
                        g[0],
                        g[1],
                        g[2],
                    )
                }
            }
            OpKind::Attention { dtype, .. } => {
                let Some(s) = sched::attention_shape(0, kind)? else {
                    return Ok(());
                };
                let dt = dtype.index();
                let a = p.attn[dt];
                // SAFETY: Q, O, KV and the workspace were sized from this stream's largest
                // attention of the dtype (the workspace by the device's own rule).
                unsafe {
                    drv.attention(self.dev, cs, dt, &s, a[0], a[2], a[1], a[3], p.ws_elems[dt])
                }
            }
            OpKind::Elementwise { bytes, .. } => {
                let n = (bytes / 4) as usize;
                // SAFETY: the source and destination hold half of this stream's largest
                // elementwise op each, `bytes / 4` fp16 elements.
                unsafe {
                    drv.axpb(
                        self.dev,
                        cs,
                        DType::Fp16.index(),
                        &Strided::contiguous(n),
                        p.elem[0],
                        p.elem[1],
                        1.0001,
                        0.5,
                    )
                }
            }
            // `sched::needs` rejects all-reduces and batched attention before a run starts.
            OpKind::AllReduce { .. } | OpKind::BatchAttention { .. } => Ok(()),
        }
    }
}

impl<D: Driver> Worker for CudaWorker<'_, D> {
    fn stream(&self) -> StreamId {
        self.stream_id
    }

    fn begin(&mut self) -> Result<(), Error> {
        self.drv.bind(self.dev)
    }

    fn op(&mut self, op: OpId) -> Result<(), Error> {
        let began = Instant::now();
        let issued = self.issue_op(op);
        self.host.push((op.0, began, Instant::now()));
        issued
    }
}

impl<D: Driver> Executor for CudaExecutor<D> {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn run(&mut self, schedule: &Schedule) -> Result<Timeline, Error> {
        guarded(|| self.run_inner(schedule))
    }

    fn idle_sync_s(&mut self, reps: u32) -> Result<f64, Error> {
        guarded(|| {
            self.ensure_devices(1)?;
            let d = &mut self.devices[0];
            d.ensure_streams(&self.drv, 1)?;
            self.drv.bind(&d.dev)?;
            let s = &d.streams[0];
            self.drv.synchronize(s)?;
            sched::median_time(reps, || self.drv.synchronize(s))
        })
    }
}
