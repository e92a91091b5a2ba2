# The same training step as `spillway bench --config tiny --device cpu` in
# PyTorch on the CPU (fp32, AdamW), for the CPU backend's speed comparison.
# Model code is ../shared/bench/torch_llama.py's (carried as .shared/), built
# with the tiny preset's shape. Prints one JSON line.
import json, os, sys, time
import torch
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".shared"))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "shared", "bench"))
import torch_llama as t

threads = int(os.environ.get("THREADS", os.cpu_count()))
torch.set_num_threads(threads)
V, d, L, nh, nkv, ff = 4096, 256, 4, 8, 4, 768
B, T = int(os.environ.get("BATCH", 16)), int(os.environ.get("SEQ", 128))
torch.manual_seed(0)
m = t.Llama(V, d, L, nh, nkv, ff, T)
opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
idx = torch.randint(0, V, (B, T)); tgt = torch.randint(0, V, (B, T))
def step():
    loss = m(idx, tgt); loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
for _ in range(2): step()
times = []
for _ in range(6):
    t0 = time.perf_counter(); step(); times.append(time.perf_counter() - t0)
times.sort(); dt = times[len(times) // 2]
print(json.dumps({"system": "pytorch-cpu", "torch": torch.__version__, "threads": threads, "config": "tiny",
                  "batch": B, "seq": T, "step_s": dt, "tok_s": B * T / dt}))
