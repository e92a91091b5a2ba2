# The PyTorch baseline for spillway's decoding (bench/gpu_decode.sh):
# transformers' LlamaForCausalLM of a LLaMA shape with random bf16 weights,
# greedy `generate` on one GPU, measured as batch_decode_cuda_bench measures
# spillway:
#   - batch-1 decode after a 512-token prompt: tokens a second from the
#     time of 129 new tokens less the first's (the prompt's), eager with the
#     dynamic cache and, where it runs, with the static cache and the
#     forward compiled (torch.compile "reduce-overhead": CUDA graphs);
#   - time to the first token for 128- and 2,048-token prompts (eager);
#   - batches of 16 and 64 sequences of 128-token prompts and 256-token
#     answers, generated together: output tokens a second (transformers
#     batches statically; spillway's engine admits and retires requests
#     at every step).
# One JSON line per measurement; a variant that fails says why in its line.
#   python bench/torch_decode.py [--shape llama3-8b] [--device cuda]
import argparse, json, sys, time
import torch

SHAPES = {  # vocab, hidden, layers, heads, kv heads, ffn
    "llama3-8b": (128256, 4096, 32, 32, 8, 14336),
    "llama3.2-1b": (128256, 2048, 16, 32, 8, 8192),
    "tiny": (512, 64, 2, 4, 2, 128),
}


def make_model(shape, device):
    from transformers import LlamaConfig, LlamaForCausalLM
    V, d, L, nh, nkv, ff = SHAPES[shape]
    config = LlamaConfig(vocab_size=V, hidden_size=d, num_hidden_layers=L, num_attention_heads=nh,
                         num_key_value_heads=nkv, intermediate_size=ff, max_position_embeddings=8192,
                         rope_theta=500000.0, tie_word_embeddings=False, attn_implementation="sdpa",
                         bos_token_id=None, eos_token_id=None, pad_token_id=0)
    torch.manual_seed(0)
    with torch.device(device):
        model = LlamaForCausalLM(config).to(torch.bfloat16).eval()
    return model, config


def sync(device):
    if device == "cuda": torch.cuda.synchronize()


def timed_generate(model, prompt, new_tokens, device, **kw):
    sync(device)
    t = time.perf_counter()
    with torch.no_grad():
        out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=new_tokens,
                             min_new_tokens=new_tokens, do_sample=False, **kw)
    sync(device)
    assert out.shape[1] == prompt.shape[1] + new_tokens, out.shape
    return time.perf_counter() - t


def line(**r):
    print(json.dumps(r), flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--shape", default="llama3-8b", choices=SHAPES)
    p.add_argument("--device", default="cuda")
    p.add_argument("--context", type=int, default=512)
    p.add_argument("--tokens", type=int, default=128, help="batch-1 decode: new tokens timed")
    p.add_argument("--prompts", default="128,2048")
    p.add_argument("--batches", default="16,64")
    p.add_argument("--batch-prompt", type=int, default=128)
    p.add_argument("--batch-tokens", type=int, default=256)
    p.add_argument("--no-compile", action="store_true")
    p.add_argument("--compiled-only", action="store_true", help="only the compiled batch-1 decode")
    a = p.parse_args()
    import transformers
    model, config = make_model(a.shape, a.device)
    V = config.vocab_size
    g = torch.Generator(device="cpu").manual_seed(7)
    ids = lambda b, n: torch.randint(1, V, (b, n), generator=g).to(a.device)
    common = dict(system="transformers", transformers=transformers.__version__, torch=torch.__version__,
                  config=a.shape, device=torch.cuda.get_device_name() if a.device == "cuda" else a.device)

    def decode(name, **kw):
        prompt = ids(1, a.context)
        try:
            for _ in range(2): timed_generate(model, prompt, a.tokens + 1, a.device, **kw)  # warm-up (and compile)
            first = min(timed_generate(model, prompt, 1, a.device, **kw) for _ in range(3))
            whole = min(timed_generate(model, prompt, a.tokens + 1, a.device, **kw) for _ in range(3))
            step = (whole - first) / a.tokens
            line(name=name, batch=1, context=a.context, decode_tok_s=round(1 / step, 1), ms_per_step=round(step * 1e3, 3),
                 **common)
        except Exception as e:  # a variant this stack cannot run is reported, not fatal
            line(name=name, batch=1, error=f"{type(e).__name__}: {str(e).splitlines()[0][:200]}", **common)

    if a.compiled_only:
        a.prompts = a.batches = ""
    else:
        decode("transformers_decode_eager")
    for n in map(int, filter(None, a.prompts.split(","))):
        prompt = ids(1, n)
        timed_generate(model, prompt, 1, a.device)
        ttft = min(timed_generate(model, prompt, 1, a.device) for _ in range(3))
        line(name="transformers_prefill", batch=1, prompt_tokens=n, ttft_s=round(ttft, 4),
             prefill_tok_s=round(n / ttft, 1), **common)
    for b in map(int, filter(None, a.batches.split(","))):
        prompt = ids(b, a.batch_prompt)
        try:
            timed_generate(model, prompt, 4, a.device)
            t = timed_generate(model, prompt, a.batch_tokens, a.device)
            line(name="transformers_batch", batch=b, prompt_tokens=a.batch_prompt, output_tokens=b * a.batch_tokens,
                 tok_s=round(b * a.batch_tokens / t, 1), **common)
        except torch.cuda.OutOfMemoryError:
            line(name="transformers_batch", batch=b, error="out of memory", **common)
    # Last: compiling takes minutes, and a caller's time limit then leaves
    # every eager line written. generate compiles the forward itself with a
    # static cache ("reduce-overhead": CUDA graphs) and marks each graph
    # step; a forward compiled outside it fails when a graph's outputs are
    # overwritten by the next step.
    if not a.no_compile:
        decode("transformers_decode_static_compiled", cache_implementation="static")
    return 0


if __name__ == "__main__":
    sys.exit(main())
