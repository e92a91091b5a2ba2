# PyTorch's own context parallelism on the LLaMA model of bench/torch_llama.py,
# the baseline for spillway's --cp: run under torchrun, every GPU of the run
# one context-parallel group taking its share of every sequence (PyTorch's
# experimental `context_parallel`: SDPA becomes ring attention over the
# group, the sequence split into 2 x world chunks for a balanced causal
# load), the weights sharded over the same GPUs by FSDP2, as torchtitan
# composes them. The keys and values are repeated to every query head
# before the attention (the ring attention takes plain multi-head SDPA).
#   torchrun --nproc-per-node 4 bench/torch_context_parallel.py --shape llama3-8b --seq 131072 --recompute
# Rank 0 prints one JSON line: gpus, cp, seq, tok_s, tok_s_per_gpu, mfu,
# peak_GiB, or the error (out of memory) that stopped it.
import argparse, json, os, sys
import torch, torch.distributed as dist, torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard, MixedPrecisionPolicy
from torch.distributed.tensor.experimental import context_parallel
from torch.nn.attention import SDPBackend, sdpa_kernel
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_llama
from torch_llama import Llama, PEAK, SHAPES, materialize, seconds_a_step

ap = argparse.ArgumentParser()
ap.add_argument("--shape", default="llama3-8b", choices=SHAPES)
ap.add_argument("--seq", type=int, default=131072)
ap.add_argument("--grad-accum", type=int, default=1, help="sequences per optimizer step")
ap.add_argument("--steps", type=int, default=2)
ap.add_argument("--recompute", action="store_true", help="activation checkpointing of every block")
a = ap.parse_args()

dist.init_process_group("nccl")
rank, world = dist.get_rank(), dist.get_world_size()
torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
mesh = init_device_mesh("cuda", (world,), mesh_dim_names=("cp",))
assert a.seq % (2 * world) == 0, "the sequence must cut into 2 x world chunks"


def mha_attention(q, k, v):
    # GQA's key/value heads repeated to the query heads, so the ring
    # attention sees plain SDPA (looked up at each call: the context patches it).
    rep = q.size(1) // k.size(1)
    if rep > 1: k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


torch_llama.attention = mha_attention
torch.manual_seed(0)
V, d, L, nh, nkv, ff = SHAPES[a.shape]
with torch.device("meta"):
    m = Llama(V, d, L, nh, nkv, ff, a.seq)
if a.recompute:
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
    for i, b in enumerate(m.blocks): m.blocks[i] = checkpoint_wrapper(b)
P = sum(p.numel() for n, p in m.named_parameters() if "emb" not in n and p.dim() == 2)
# spillway's terms: fp32 parameters and AdamW state, bf16 compute.
kw = {"mesh": mesh, "mp_policy": MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)}
for b in m.blocks: fully_shard(b, **kw)
model = fully_shard(m, **kw)
materialize(m, d, nh, a.seq)  # each rank its shards only
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
g = torch.Generator(device="cuda").manual_seed(0)  # the group reads the same sequence
idx = torch.randint(0, V, (1, a.seq), device="cuda", generator=g)
tgt = torch.randint(0, V, (1, a.seq), device="cuda", generator=g)


def step():
    for _ in range(a.grad_accum):
        # Entering shards the sequence and the rope tables along dim 1 (in
        # place, load-balanced), leaving puts the tables back.
        x, y = idx.clone(), tgt.clone()
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION]), \
                context_parallel(mesh, buffers=[x, y, m.cos, m.sin], buffer_seq_dims=[1, 1, 1, 1], no_restore_buffers={x, y}):
            (model(x, y) / a.grad_accum).backward()
    opt.step(); opt.zero_grad(set_to_none=True)


result = dict(system="pytorch-cp-fsdp2", shape=a.shape, seq=a.seq, batch=1, grad_accum=a.grad_accum, gpus=world, dp=1,
              tp=1, pp=1, cp=world, fp32_master=True, recompute=a.recompute)
try:
    dt = seconds_a_step(step, a.steps, dist.barrier)
    tok = a.seq * a.grad_accum / dt
    flops = 6 * P + 6 * L * a.seq * d
    result.update(step_s=round(dt, 4), tok_s=round(tok), tok_s_per_gpu=round(tok / world),
                  mfu=round(tok / world * flops / (PEAK * 1e12), 4),
                  peak_GiB=round(torch.cuda.max_memory_allocated() / 2**30, 1))
except torch.cuda.OutOfMemoryError as e:
    result.update(error="out of memory", detail=str(e).splitlines()[0][:200],
                  peak_GiB=round(torch.cuda.max_memory_allocated() / 2**30, 1))
if rank == 0: print(json.dumps(result), flush=True)
dist.destroy_process_group()
