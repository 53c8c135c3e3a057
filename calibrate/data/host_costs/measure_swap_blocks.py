"""Swap time against block size, the way vLLM 0.4's swap issues its copies.

vLLM 0.4.2 swaps a request's KV cache with one cudaMemcpyAsync per block, per layer, for keys and
for values (`CacheEngine.swap_in/out` -> `PagedAttention.swap_blocks` -> `swap_blocks` in
csrc/cache_kernels.cu: a C++ loop over the block mapping). This script issues the same copies
through the raw CUDA runtime (CuPy's `memcpyAsync`, from a Python loop: the loop's own cost is
measured and reported as `loop_us`) between pinned host memory and the GPU, for Llama-2-7B's cache
shape (32 layers, K and V, 32 heads x 128, fp16: 8 KiB per token per layer per K or V).

Run on a CUDA machine with PyTorch and CuPy:

    python3 measure_swap_blocks.py > swap_blocks_<gpu>.csv

Each row: direction (d2h = swap out, h2d = swap in), evicted tokens, block size in tokens, the
number of copies (layers x 2 x blocks), bytes moved, the host's time to issue them all (host_s),
the time until the GPU finished (wall_s), median of 3 after a warm-up.
"""
import statistics
import sys
import time

import cupy as cp
import cupyx
import torch

LAYERS, HEADS, HEAD_DIM, ELEM = 32, 32, 128, 2
PER_TOKEN = HEADS * HEAD_DIM * ELEM  # bytes per token per layer, K or V
rt = cp.cuda.runtime
stream = cp.cuda.Stream(non_blocking=True)

# The Python loop's own cost per iteration (no copy): subtracted by the reader, not here.
t0 = time.perf_counter()
n = 200000
f = lambda a, b, c, d, e: None  # noqa: E731
for _ in range(n):
    f(0, 0, 0, 0, 0)
loop_us = (time.perf_counter() - t0) / n * 1e6

rows = []
for tokens in (1024, 4096):
    nbytes = tokens * PER_TOKEN
    gpu = [cp.empty(nbytes, dtype=cp.uint8) for _ in range(2 * LAYERS)]
    host = [cupyx.empty_pinned(nbytes, dtype="uint8") for _ in range(2 * LAYERS)]
    for h in host:
        h[:] = 1
    for direction in ("d2h", "h2d"):
        kind = rt.memcpyDeviceToHost if direction == "d2h" else rt.memcpyHostToDevice
        for bs in (1, 2, 4, 8, 16, 32, 64, 128):
            blocks = tokens // bs
            block_bytes = bs * PER_TOKEN
            if direction == "d2h":
                pairs = [(h.ctypes.data, g.data.ptr) for g, h in zip(gpu, host)]
            else:
                pairs = [(g.data.ptr, h.ctypes.data) for g, h in zip(gpu, host)]
            hs, ws = [], []
            for r in range(4):
                stream.synchronize()
                t0 = time.perf_counter()
                for dst, src in pairs:
                    for b in range(blocks):
                        off = b * block_bytes
                        rt.memcpyAsync(dst + off, src + off, block_bytes, kind, stream.ptr)
                t1 = time.perf_counter()
                stream.synchronize()
                t2 = time.perf_counter()
                if r:
                    hs.append(t1 - t0)
                    ws.append(t2 - t0)
            copies = 2 * LAYERS * blocks
            rows.append((direction, tokens, bs, copies, copies * block_bytes,
                         statistics.median(hs), statistics.median(ws)))
    del gpu, host

print(f"# {torch.cuda.get_device_name()} CUDA {torch.version.cuda} CuPy {cp.__version__}, "
      f"{time.strftime('%Y-%m-%d', time.gmtime())}: calibrate/data/host_costs/measure_swap_blocks.py; "
      f"Python loop cost per copy {loop_us:.3f} us (included in host_s)")
print("direction,evicted_tokens,block_tokens,copies,bytes,host_s,wall_s")
for r in rows:
    print(f"{r[0]},{r[1]},{r[2]},{r[3]},{r[4]},{r[5]:.6f},{r[6]:.6f}")
