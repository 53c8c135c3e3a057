"""GEMM time of bf16 and fp8 (e4m3, per-tensor scales: what vLLM's --quantization fp8 runs on
Hopper through torch._scaled_mm / CUTLASS) over the token counts of decode and prefill, at
Llama-3-8B's layer shapes. Run on a CUDA machine with PyTorch:

    python3 measure_fp8_gemm.py > fp8_gemm_<gpu>.csv

Rows: dtype, m (tokens), n, k, median device time in microseconds over 50 calls (CUDA events),
and the TFLOP/s it makes. Each figure is device time alone: calls replayed from a CUDA graph.
"""
import statistics
import time

import torch

dev = torch.device("cuda")
shapes = [(6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336)]  # qkv, out, gate+up, down
ms = [1, 8, 32, 128, 512, 2048, 8192]


def median_us(fn, reps=20, inner=20):
    """Device time per call: `inner` calls captured in one CUDA graph, replayed `reps` times
    between events, so the host's dispatch (~20 us a call in eager PyTorch) cannot starve the
    GPU and show in the figure."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(inner):
            fn()
    g.replay()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for s, e in zip(starts, ends):
        s.record()
        g.replay()
        e.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) * 1e3 / inner for s, e in zip(starts, ends))


print(f"# {torch.cuda.get_device_name()} torch {torch.__version__} CUDA {torch.version.cuda}, "
      f"{time.strftime('%Y-%m-%d', time.gmtime())}: calibrate/data/measured_kernels/measure_fp8_gemm.py")
print("dtype,m,n,k,median_us,tflops")
for n, k in shapes:
    w = torch.randn(n, k, device=dev, dtype=torch.bfloat16)
    w8 = w.to(torch.float8_e4m3fn)
    one = torch.ones((), device=dev, dtype=torch.float32)
    for m in ms:
        a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
        a8 = a.to(torch.float8_e4m3fn)
        cases = {"bf16": lambda: torch.nn.functional.linear(a, w)}
        # _scaled_mm needs m a multiple of 16 on some builds: pad as vLLM's fp8 linear does.
        mp = max(16, (m + 15) // 16 * 16)
        a8p = torch.zeros(mp, k, device=dev, dtype=torch.float8_e4m3fn)
        a8p[:m] = a8
        cases["fp8"] = lambda: torch._scaled_mm(a8p, w8.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
        for dt, fn in cases.items():
            try:
                us = median_us(fn)
            except Exception as e:  # an unsupported shape or build: say so, go on
                print(f"# {dt} m={m} n={n} k={k}: {e}".replace("\n", " ")[:200])
                continue
            print(f"{dt},{m},{n},{k},{us:.2f},{2 * m * n * k / us / 1e6:.1f}")
