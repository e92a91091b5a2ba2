# PyTorch's data parallelism on the LLaMA model of bench/torch_llama.py, the
# baseline for spillway's --nproc-per-node: run under torchrun, every rank
# trains batch B x seq T micro-batches, GA of them per rank between optimizer
# steps (gradients synchronised on the last), DDP or FSDP2, eager or compiled.
#   torchrun --nproc-per-node 2 bench/torch_data_parallel.py --mode ddp --compile
# For the largest model FSDP2 trains (spillway's terms: fp32 masters and
# moments, layers recomputed): --layers N --fp32-master --recompute, the
# model made on the meta device and materialised shard by shard.
# Rank 0 prints one JSON line: gpus, dp, tok_s, tok_s_per_gpu, mfu, peak_GiB.
import argparse, json, os, sys
import torch, torch.distributed as dist
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_llama import Llama, PEAK, SHAPES, materialize, seconds_a_step

ap = argparse.ArgumentParser()
ap.add_argument("--shape", default="llama3.2-1b", choices=SHAPES)
ap.add_argument("--seq", type=int, default=4096)
ap.add_argument("--batch", type=int, default=4)
ap.add_argument("--grad-accum", type=int, default=4, help="micro-batches per rank per optimizer step")
ap.add_argument("--steps", type=int, default=5)
ap.add_argument("--mode", default="ddp", choices=["ddp", "fsdp2"])
ap.add_argument("--compile", action="store_true")
ap.add_argument("--layers", type=int, help="the shape's width with this many layers")
ap.add_argument("--fp32-master", action="store_true",
                help="fsdp2: fp32 parameters and AdamW state, bf16 compute (MixedPrecisionPolicy)")
ap.add_argument("--recompute", action="store_true", help="activation checkpointing of every block")
a = ap.parse_args()

dist.init_process_group("nccl")
rank, world = dist.get_rank(), dist.get_world_size()
torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
torch.manual_seed(0)
V, d, L, nh, nkv, ff = SHAPES[a.shape]
L = a.layers or L
big = a.mode == "fsdp2" and a.fp32_master
with torch.device("meta" if big else "cpu"):
    m = Llama(V, d, L, nh, nkv, ff, a.seq)
if a.recompute:
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
    for i, b in enumerate(m.blocks): m.blocks[i] = checkpoint_wrapper(b)
if not big: m = m.cuda().to(torch.bfloat16)
P = sum(p.numel() for n, p in m.named_parameters() if "emb" not in n and p.dim() == 2)
if a.mode == "ddp":
    from torch.nn.parallel import DistributedDataParallel as DDP
    model = DDP(m, gradient_as_bucket_view=True)
    def set_sync(on): model.require_backward_grad_sync = on
else:
    from torch.distributed.fsdp import fully_shard, MixedPrecisionPolicy
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if a.fp32_master else None
    kw = {"mp_policy": mp} if mp else {}
    for b in m.blocks: fully_shard(b, **kw)
    model = fully_shard(m, **kw)
    if big:
        materialize(m, d, nh, a.seq)  # each rank its shards only
    def set_sync(on): model.set_requires_gradient_sync(on)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
f = torch.compile(model) if a.compile else model
g = torch.Generator(device="cuda").manual_seed(rank)
idx = torch.randint(0, V, (a.batch, a.seq), device="cuda", generator=g)
tgt = torch.randint(0, V, (a.batch, a.seq), device="cuda", generator=g)

def step():
    for i in range(a.grad_accum):
        set_sync(i == a.grad_accum - 1)
        (f(idx, tgt) / a.grad_accum).backward()
    opt.step(); opt.zero_grad(set_to_none=True)

dt = seconds_a_step(step, a.steps, dist.barrier)
tok_gpu = a.batch * a.seq * a.grad_accum / dt
flops = 6 * P + 6 * L * a.seq * d
if rank == 0:
    print(json.dumps(dict(system="pytorch-" + a.mode + ("-compiled" if a.compile else ""), shape=a.shape, layers=L,
                          fp32_master=a.fp32_master, recompute=a.recompute, seq=a.seq,
                          batch=a.batch, grad_accum=a.grad_accum * world, gpus=world, dp=world, step_s=round(dt, 4),
                          tok_s=round(tok_gpu * world), tok_s_per_gpu=round(tok_gpu), mfu=round(tok_gpu * flops / (PEAK * 1e12), 4),
                          peak_GiB=round(torch.cuda.max_memory_allocated() / 2**30, 1))), flush=True)
dist.destroy_process_group()
