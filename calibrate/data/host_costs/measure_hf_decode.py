"""Where an eager Hugging Face decode step spends its time: host (framework dispatch) or GPU.

Builds OPT-6.7B (KVPR Table 3's model) from its config with random fp16 weights on the GPU (no
download), prefills a prompt, then times decode steps with the KV cache kept on the GPU, eager
attention, no CUDA graphs: the stack of the KVPR paper's runs (Transformers eager PyTorch), minus
its offloading. Per batch size it reports the wall time per decode step and the GPU's busy time
per step (the sum of the CUDA kernels' durations from torch.profiler, in a separate run), and the
number of kernels launched per step. Where wall >> busy, the host thread binds the step.

    python3 measure_hf_decode.py > hf_decode_<gpu>.csv
"""
import statistics
import time

import torch
import transformers
from torch.profiler import ProfilerActivity, profile
from transformers import OPTConfig, OPTForCausalLM

cfg = OPTConfig(hidden_size=4096, num_hidden_layers=32, ffn_dim=16384, num_attention_heads=32,
                vocab_size=50272, max_position_embeddings=2048, word_embed_proj_dim=4096,
                do_layer_norm_before=True)
cfg._attn_implementation = "eager"
torch.manual_seed(0)
with torch.device("cuda"):
    model = OPTForCausalLM(cfg).to(torch.float16).eval()
PROMPT, STEPS = 128, 16
rows = []
for batch in (1, 4, 16, 64):
    ids = torch.randint(0, 50000, (batch, PROMPT), device="cuda")
    with torch.no_grad():
        out = model(ids, use_cache=True)
        past = out.past_key_values
        nxt = out.logits[:, -1:].argmax(-1)

        def step():
            global past, nxt
            o = model(nxt, past_key_values=past, use_cache=True)
            past = o.past_key_values
            nxt = o.logits[:, -1:].argmax(-1)

        for _ in range(3):
            step()
        torch.cuda.synchronize()
        walls = []
        for _ in range(STEPS):
            t0 = time.perf_counter()
            step()
            torch.cuda.synchronize()
            walls.append(time.perf_counter() - t0)
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(4):
                step()
            torch.cuda.synchronize()
        avg = prof.key_averages()
        dev_us = lambda e: getattr(e, "self_device_time_total", None) or getattr(e, "self_cuda_time_total", 0)  # noqa: E731
        busy = sum(dev_us(e) for e in avg) / 4 / 1e6
        kernels = sum(e.count for e in avg if dev_us(e) > 0) / 4
        rows.append((batch, statistics.median(walls), busy, kernels))
    del past, out

print(f"# {torch.cuda.get_device_name()} torch {torch.__version__} transformers "
      f"{transformers.__version__}, OPT-6.7B random fp16 weights, eager attention, prompt {PROMPT}, "
      f"{time.strftime('%Y-%m-%d', time.gmtime())}: calibrate/data/host_costs/measure_hf_decode.py")
print("batch,wall_step_s,gpu_busy_step_s,kernels_per_step")
for r in rows:
    print(f"{r[0]},{r[1]:.6f},{r[2]:.6f},{r[3]:.0f}")
