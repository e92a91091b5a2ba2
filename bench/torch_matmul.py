"""PyTorch's bf16 matmuls on the shapes of bench/matmul_cuda_bench.cc.

The same LLaMA-3.2-1B step shapes at 16384 tokens (q|k|v and gate|up stacked),
the same uniform [-1, 1) data and the same timing: cudaEvent intervals of
back-to-back products lasting about 2 ms, after 3 warm-up runs. --iterations
sets how many intervals (20 matches the C++ benchmark's default); the kernel
each shape ran is read from the profiler, so the two libraries' choices can be
compared name for name. Prints one line per shape and, with --json, appends a
JSON line.
"""

import argparse
import json
import math

import torch

TOKENS, DIM, KV, FFN, VOCAB = 16384, 2048, 512, 8192, 128256
CEILING = 801.0
LINEARS = [("qkv", DIM, DIM + 2 * KV), ("o", DIM, DIM), ("gate|up", DIM, 2 * FFN),
           ("down", FFN, DIM), ("lm_head", DIM, VOCAB)]


def shapes():
    """(name, m, n, k, trans_a, trans_b) in the C++ benchmark's row-major terms."""
    out = [("square", 8192, 8192, 8192, False, False), ("square", 8192, 8192, 8192, False, True)]
    for name, fan_in, fan_out in LINEARS:
        out.append((name + " fwd", TOKENS, fan_out, fan_in, False, True))
        out.append((name + " dX", TOKENS, fan_in, fan_out, False, False))
        out.append((name + " dW bf16", fan_out, fan_in, TOKENS, True, False))
    return out


def operand(rows, cols, transposed):
    """A row-major [rows, cols] operand, or the transpose view of a stored [cols, rows]."""
    if transposed:
        return (torch.rand(cols, rows, device="cuda", dtype=torch.bfloat16) * 2 - 1).t()
    return torch.rand(rows, cols, device="cuda", dtype=torch.bfloat16) * 2 - 1


def kernel_of(fn):
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    return names[0] if names else "?"


def time_shape(m, n, k, trans_a, trans_b, iterations):
    a = operand(m, k, trans_a)
    b = operand(k, n, trans_b)
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    fn = lambda: torch.mm(a, b, out=c)
    for _ in range(3):
        fn()
    flops = 2.0 * m * n * k
    reps = max(1, min(200, math.ceil(2e-3 / (flops / (CEILING * 1e12)))))
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    total_ms, products = 0.0, 0
    for _ in range(iterations):
        start.record()
        for _ in range(reps):
            fn()
        stop.record()
        stop.synchronize()
        total_ms += start.elapsed_time(stop)
        products += reps
    return flops * products / (total_ms * 1e-3) * 1e-12, kernel_of(fn)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--json", help="append a JSON line with every shape's TFLOP/s here")
    args = parser.parse_args()
    results = {}
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, {args.iterations} intervals per shape")
    for name, m, n, k, ta, tb in shapes():
        tflops, kernel = time_shape(m, n, k, ta, tb, args.iterations)
        op = ("T" if ta else "N") + ("T" if tb else "N")
        results[f"{name} {m}x{n}x{k} {op}"] = round(tflops, 1)
        print(f"{name:16s} {m}x{n}x{k:<8d} {op} {tflops:7.1f} TFLOP/s  {kernel[:110]}")
    if args.json:
        with open(args.json, "a") as f:
            f.write(json.dumps({"system": "torch.mm", "device": torch.cuda.get_device_name(),
                                "iterations": args.iterations, "tflops": results}) + "\n")


if __name__ == "__main__":
    main()
