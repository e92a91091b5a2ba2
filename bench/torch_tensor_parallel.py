# PyTorch's own tensor parallelism on the LLaMA model of bench/torch_llama.py,
# the baseline for spillway's --tp: run under torchrun, every GPU of the run
# one tensor-parallel group, each block's q, k, v, gate and up split by
# output features (ColwiseParallel) and o and down by input features
# (RowwiseParallel), as Megatron-LM splits them, without sequence
# parallelism (this model's blocks have no attention or MLP submodule to
# gather its input once). Embedding, final norm and lm_head stay whole on
# every rank.
#   torchrun --nproc-per-node 2 bench/torch_tensor_parallel.py --shape llama3.2-1b --seq 4096 --batch 4
# Rank 0 prints one JSON line: gpus, dp, tp, tok_s, tok_s_per_gpu, mfu, peak_GiB.
import argparse, json, os, sys
import torch, torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_llama import Llama, PEAK, SHAPES, seconds_a_step

ap = argparse.ArgumentParser()
ap.add_argument("--shape", default="llama3.2-1b", choices=SHAPES)
ap.add_argument("--seq", type=int, default=4096)
ap.add_argument("--batch", type=int, default=1, help="sequences a micro-batch")
ap.add_argument("--grad-accum", type=int, default=4, help="micro-batches per optimizer step")
ap.add_argument("--steps", type=int, default=5)
ap.add_argument("--compile", action="store_true")
ap.add_argument("--recompute", action="store_true", help="activation checkpointing of every block")
a = ap.parse_args()

torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
dist.init_process_group("nccl")
rank, world = dist.get_rank(), dist.get_world_size()
mesh = init_device_mesh("cuda", (world,), mesh_dim_names=("tp",))
torch.manual_seed(0)  # every rank makes the same whole weights before taking its pieces
V, d, L, nh, nkv, ff = SHAPES[a.shape]
m = Llama(V, d, L, nh, nkv, ff, a.seq).cuda().to(torch.bfloat16)
P = sum(p.numel() for n, p in m.named_parameters() if "emb" not in n and p.dim() == 2)
split = {"wq": ColwiseParallel(), "wk": ColwiseParallel(), "wv": ColwiseParallel(), "wo": RowwiseParallel(),
         "w1": ColwiseParallel(), "w3": ColwiseParallel(), "w2": RowwiseParallel()}
for b in m.blocks:
    parallelize_module(b, mesh, split)
    b.nh, b.nkv = b.nh // world, b.nkv // world  # the heads a rank's pieces hold
if a.recompute:
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
    for i, b in enumerate(m.blocks): m.blocks[i] = checkpoint_wrapper(b)
opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
f = torch.compile(m) if a.compile else m
g = torch.Generator(device="cuda").manual_seed(0)  # the group reads the same tokens
idx = torch.randint(0, V, (a.batch, a.seq), device="cuda", generator=g)
tgt = torch.randint(0, V, (a.batch, a.seq), device="cuda", generator=g)

def step():
    for _ in range(a.grad_accum): (f(idx, tgt) / a.grad_accum).backward()
    opt.step(); opt.zero_grad(set_to_none=True)

dt = seconds_a_step(step, a.steps, dist.barrier)
tok = a.batch * a.seq * a.grad_accum / dt
flops = 6 * P + 6 * L * a.seq * d
if rank == 0:
    print(json.dumps(dict(system="pytorch-tp" + ("-compiled" if a.compile else ""), shape=a.shape, seq=a.seq,
                          batch=a.batch, grad_accum=a.grad_accum, gpus=world, dp=1, tp=world, pp=1, cp=1,
                          recompute=a.recompute, step_s=round(dt, 4), tok_s=round(tok), tok_s_per_gpu=round(tok / world),
                          mfu=round(tok / world * flops / (PEAK * 1e12), 4),
                          peak_GiB=round(torch.cuda.max_memory_allocated() / 2**30, 1))), flush=True)
dist.destroy_process_group()
