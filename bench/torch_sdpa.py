#!/usr/bin/env python3
"""PyTorch's scaled_dot_product_attention per backend on the 1B step's
attention (batch 4, seq 4096, causal, 32 query and 8 key/value heads of 64)
and on head dim 128 (16/4 heads), forward and backward timed apart: the
reference for bench/attention_cuda_bench's cuDNN numbers.

FLOPs count the causal half of the scores: forward 2 products of
2*b*h*s^2*d/2, backward 2.5 times the forward (as attention_cuda_bench).
Prints one line per backend; "default" is what PyTorch picks by itself.
usage (on the GPU machine): python3 bench/torch_sdpa.py
"""
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

BATCH, SEQ, REPEATS = 4, 4096, 15


def median_ms(run):
    forward, backward = [], []
    for _ in range(REPEATS):
        a, b, c = (torch.cuda.Event(enable_timing=True) for _ in range(3))
        a.record()
        out = run()
        b.record()
        out.backward(run.grad)
        c.record()
        c.synchronize()
        forward.append(a.elapsed_time(b))
        backward.append(b.elapsed_time(c))
    return sorted(forward)[REPEATS // 2], sorted(backward)[REPEATS // 2]


torch.manual_seed(0)
for head_dim, q_heads, kv_heads in ((64, 32, 8), (128, 16, 4)):
    def tensor(heads, grad=True):
        return torch.randn(BATCH, heads, SEQ, head_dim, device="cuda", dtype=torch.bfloat16, requires_grad=grad)
    q, k, v = tensor(q_heads), tensor(kv_heads), tensor(kv_heads)

    def run():
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    run.grad = tensor(q_heads, grad=False)
    forward_flops = 2.0 * BATCH * q_heads * SEQ * SEQ * head_dim
    for backend in (SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, None):
        name = backend.name if backend is not None else "default"
        try:
            with sdpa_kernel([backend]) if backend is not None else torch.enable_grad():
                for _ in range(3):
                    run().backward(run.grad)
                fwd, bwd = median_ms(run)
        except RuntimeError as e:  # a backend that refuses the shape
            print(f"head_dim {head_dim} {name}: refused ({str(e).splitlines()[0][:100]})", flush=True)
            continue
        print(f"head_dim {head_dim} {name}: forward {fwd:.3f} ms {forward_flops / fwd / 1e9:.0f} TFLOP/s, "
              f"backward {bwd:.3f} ms {2.5 * forward_flops / bwd / 1e9:.0f} TFLOP/s", flush=True)
