# The PEFT baseline of bench/gpu_lora.sh: transformers' LlamaForCausalLM of a
# given shape with random bf16 weights and a PEFT LoRA adapter (rank, alpha,
# all seven projections), AdamW (fused) over the adapters, random tokens:
# the median step's tokens/s, its MFU and the peak device memory, as one
# JSON line. With --qlora the base is bitsandbytes' NF4 (Linear4bit, bf16
# compute), as PEFT's QLoRA recipe makes it. MFU counts what a LoRA step
# computes, as spillway's bench does (train/lora_plan.h):
#   flops/token = 4*P_matmul + 6*P_adapters + 6*L*s*d
# What is not importable (peft, bitsandbytes) is said in the JSON line and
# the script exits 0: the GPU machine has no network to install it.
import argparse, json, os, sys, time

PEAK = float(os.environ.get("PEAK_TFLOPS", "989"))  # dense bf16 datasheet (H100, H200)
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def skipped(name, why):
    print(json.dumps({"name": name, "system": "peft", "skipped": why}), flush=True)
    sys.exit(0)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--name", default="peft-lora")
    p.add_argument("--seq", type=int, default=4096)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--rank", type=int, default=16)
    p.add_argument("--alpha", type=float, default=32)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--qlora", action="store_true")
    # LLaMA-3-8B's shape by default.
    p.add_argument("--vocab", type=int, default=128256)
    p.add_argument("--hidden", type=int, default=4096)
    p.add_argument("--intermediate", type=int, default=14336)
    p.add_argument("--layers", type=int, default=32)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--kv-heads", type=int, default=8)
    a = p.parse_args()
    try:
        import torch
        import transformers
    except ImportError as e:
        skipped(a.name, f"not importable: {e}")
    try:
        import peft
    except ImportError as e:
        skipped(a.name, f"peft is not importable here ({e}); nothing can be installed on this machine")
    if a.qlora:
        try:
            import bitsandbytes  # noqa: F401
        except ImportError as e:
            skipped(a.name, f"bitsandbytes is not importable here ({e}): no NF4 base for PEFT's QLoRA")
    if not torch.cuda.is_available():
        skipped(a.name, "no GPU")

    cfg = transformers.LlamaConfig(vocab_size=a.vocab, hidden_size=a.hidden, intermediate_size=a.intermediate,
                                   num_hidden_layers=a.layers, num_attention_heads=a.heads,
                                   num_key_value_heads=a.kv_heads, max_position_embeddings=max(8192, a.seq),
                                   rope_theta=500000.0, rms_norm_eps=1e-5, tie_word_embeddings=False)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    torch.cuda.reset_peak_memory_stats()
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda"):
        model = transformers.LlamaForCausalLM(cfg)
    torch.set_default_dtype(torch.float32)
    if a.qlora:
        # The base's linear layers (not the head) replaced by NF4 ones, as
        # from_pretrained(quantization_config=BitsAndBytesConfig(nf4)) does.
        import bitsandbytes as bnb
        for name, module in list(model.named_modules()):
            for child_name, child in list(module.named_children()):
                if isinstance(child, torch.nn.Linear) and child_name in TARGETS:
                    q = bnb.nn.Linear4bit(child.in_features, child.out_features, bias=False,
                                          compute_dtype=torch.bfloat16, quant_type="nf4")
                    q.weight = bnb.nn.Params4bit(child.weight.data.cpu(), requires_grad=False, quant_type="nf4")
                    setattr(module, child_name, q.cuda())
        torch.cuda.empty_cache()
    lora = peft.LoraConfig(r=a.rank, lora_alpha=a.alpha, lora_dropout=0.0, target_modules=TARGETS, bias="none",
                           task_type="CAUSAL_LM")
    model = peft.get_peft_model(model, lora)
    # PEFT keeps the adapters in the base's dtype (bf16) unless told; spillway
    # trains fp32 masters, so fp32 adapters here too (autocast runs them in bf16).
    for n, prm in model.named_parameters():
        if prm.requires_grad:
            prm.data = prm.data.float()
    trained = [prm for prm in model.parameters() if prm.requires_grad]
    opt = torch.optim.AdamW(trained, lr=1e-4, fused=True)
    idx = torch.randint(0, a.vocab, (a.batch, a.seq), device="cuda")

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=idx, labels=idx).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    try:
        for _ in range(a.warmup):
            step()
        times = []
        for _ in range(a.steps):
            torch.cuda.synchronize()
            t = time.perf_counter()
            step()
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t)
    except torch.cuda.OutOfMemoryError:
        print(json.dumps({"name": a.name, "system": "peft", "error": "OOM",
                          "peak_device_bytes": torch.cuda.max_memory_allocated()}), flush=True)
        return
    times.sort()
    tok_s = a.batch * a.seq / times[len(times) // 2]
    matmul = a.layers * (a.hidden * (a.hidden + 2 * a.kv_heads * (a.hidden // a.heads)) + a.hidden * a.hidden +
                         3 * a.hidden * a.intermediate) + a.vocab * a.hidden
    adapters = sum(prm.numel() for prm in trained)
    flops = 4 * matmul + 6 * adapters + 6 * a.layers * a.seq * a.hidden
    print(json.dumps({"name": a.name, "system": "peft", "peft": peft.__version__, "torch": torch.__version__,
                      "transformers": transformers.__version__, "device": torch.cuda.get_device_name(),
                      "seq": a.seq, "batch": a.batch, "rank": a.rank, "qlora": a.qlora,
                      "trained_parameters": adapters, "tok_s": round(tok_s, 1),
                      "mfu": round(tok_s * flops / (PEAK * 1e12), 4),
                      "peak_device_bytes": torch.cuda.max_memory_allocated()}), flush=True)


if __name__ == "__main__":
    main()
