"""Host-side costs of driving a GPU, as issue 18's host model needs them.

Run on a CUDA machine with PyTorch (and CuPy for the raw-runtime rows):

    python3 measure_host_costs.py > host_costs_<gpu>.csv

Each row: what was timed, by which framework, the copy size (0 for kernels), and per call
  host_us  the host thread's time to issue one call (calls issued back to back, no sync inside;
           for a blocking call, the whole call),
  wall_us  the time per call until the GPU finished them all (issue and execution overlapped),
  calls    how many calls were timed (median of 5 repetitions of that many).
Kernels are tiny (one element) so that the host's cost shows; copies are one tensor each.
"""
import statistics
import sys
import time

import torch

dev = torch.device("cuda")
torch.cuda.init()
torch.cuda.synchronize()
rows = []


def timed(fn, calls, reps=5):
    host, wall = [], []
    for r in range(reps + 1):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        if r:  # the first repetition warms up
            host.append((t1 - t0) / calls * 1e6)
            wall.append((t2 - t0) / calls * 1e6)
    return statistics.median(host), statistics.median(wall)


def add(what, fw, size, calls, fn):
    h, w = timed(fn, calls)
    rows.append((what, fw, size, h, w, calls))


# --- kernels -----------------------------------------------------------------------------
x = torch.zeros(1, device=dev, dtype=torch.float16)
for calls in (200, 5000):  # within the launch queue, and past it (steady state)
    add(f"eager_kernel_{calls}", "torch", 0, calls, lambda: x.add_(1))
a = torch.randn(1, 4096, device=dev, dtype=torch.float16)
wt = torch.randn(4096, 4096, device=dev, dtype=torch.float16)
add("eager_linear_1x4096x4096", "torch", 0, 500, lambda: torch.nn.functional.linear(a, wt))
h = torch.randn(1, 4096, device=dev, dtype=torch.float16)
ln = torch.nn.LayerNorm(4096, device=dev, dtype=torch.float16)
add("eager_layernorm_1x4096", "torch", 0, 500, lambda: ln(h))
# A CUDA graph of 100 tiny kernels, replayed: cost per kernel.
s = torch.cuda.Stream()
s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s):
    for _ in range(3):
        x.add_(1)
torch.cuda.current_stream().wait_stream(s)
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    for _ in range(100):
        x.add_(1)
h_, w_ = timed(g.replay, 200)
rows.append(("graph_replay_per_kernel_of_100", "torch", 0, h_ / 100, w_ / 100, 200 * 100))

# --- synchronisation ---------------------------------------------------------------------
add("synchronize_idle", "torch", 0, 2000, torch.cuda.synchronize)
ev = torch.cuda.Event()
add("event_record", "torch", 0, 2000, ev.record)
s2 = torch.cuda.Stream()
add("stream_wait_event", "torch", 0, 2000, lambda: s2.wait_event(ev))

# --- copies ------------------------------------------------------------------------------
for size in (4 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20):
    n = size // 2
    calls = max(5, min(500, (256 << 20) // size))
    d = torch.empty(n, device=dev, dtype=torch.float16)
    pinned = torch.empty(n, dtype=torch.float16).pin_memory()
    pageable = torch.empty(n, dtype=torch.float16)
    pinned.fill_(1.0)
    pageable.fill_(1.0)
    add("h2d_pinned", "torch", size, calls, lambda: d.copy_(pinned, non_blocking=True))
    add("h2d_pageable", "torch", size, calls, lambda: d.copy_(pageable, non_blocking=True))
    add("d2h_pinned", "torch", size, calls, lambda: pinned.copy_(d, non_blocking=True))
    add("d2h_pageable", "torch", size, calls, lambda: pageable.copy_(d, non_blocking=False))

# --- the raw runtime (CuPy's cudaMemcpyAsync / kernel launch, no framework dispatch) -------
try:
    import cupy as cp
    import cupyx

    stream = cp.cuda.Stream(non_blocking=True)
    rt = cp.cuda.runtime
    for size in (4 << 10, 64 << 10, 256 << 10, 1 << 20, 16 << 20):
        calls = max(5, min(500, (256 << 20) // size))
        dbuf = cp.empty(size, dtype=cp.uint8)
        hp = cupyx.empty_pinned(size, dtype="uint8")
        hp[:] = 1

        def cp_copy():
            rt.memcpyAsync(dbuf.data.ptr, hp.ctypes.data, size, rt.memcpyHostToDevice, stream.ptr)

        hs, ws = [], []
        for r in range(6):
            stream.synchronize()
            t0 = time.perf_counter()
            for _ in range(calls):
                cp_copy()
            t1 = time.perf_counter()
            stream.synchronize()
            t2 = time.perf_counter()
            if r:
                hs.append((t1 - t0) / calls * 1e6)
                ws.append((t2 - t0) / calls * 1e6)
        rows.append(("h2d_pinned", "cupy-runtime", size, statistics.median(hs), statistics.median(ws), calls))
    k = cp.ElementwiseKernel("float32 x", "float32 y", "y = x + 1", "plus_one")
    xs = cp.zeros(1, dtype=cp.float32)
    ys = cp.zeros(1, dtype=cp.float32)
    hs, ws = [], []
    for r in range(6):
        cp.cuda.Device().synchronize()
        t0 = time.perf_counter()
        for _ in range(500):
            k(xs, ys)
        t1 = time.perf_counter()
        cp.cuda.Device().synchronize()
        t2 = time.perf_counter()
        if r:
            hs.append((t1 - t0) / 500 * 1e6)
            ws.append((t2 - t0) / 500 * 1e6)
    rows.append(("kernel_500", "cupy-runtime", 0, statistics.median(hs), statistics.median(ws), 500))
except Exception as e:  # CuPy is optional
    print(f"# cupy rows skipped: {e}", file=sys.stderr)

print(f"# {torch.cuda.get_device_name()} torch {torch.__version__} CUDA {torch.version.cuda}, "
      f"{time.strftime('%Y-%m-%d', time.gmtime())}: calibrate/data/host_costs/measure_host_costs.py")
print("what,framework,size_bytes,host_us,wall_us,calls")
for r in rows:
    print(f"{r[0]},{r[1]},{r[2]},{r[3]:.3f},{r[4]:.3f},{r[5]}")
