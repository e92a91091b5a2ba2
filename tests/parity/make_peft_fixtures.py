#!/usr/bin/env python3
"""PEFT's LoRA as the reference for spillway's: writes the fixture folder that
tests/parity/peft_lora_test.cc compares spillway against. The fixture is
committed; rerun this only to regenerate it.

Needs torch, transformers, safetensors and peft (CPU is enough). From the
repository root:

    python3 tests/parity/make_peft_fixtures.py [OUT]

writes OUT (default tests/parity/fixtures/peft_lora): base/ (a tiny random
LlamaForCausalLM as transformers saves it), adapter/ (a LoRA adapter on all
seven projections as PEFT saves it, its A and B random so that B is not
zero) and expected.safetensors (tokens, targets, and from a float64 copy of
the adapted model: logits, the mean cross-entropy over the targets and every
adapter weight's gradient, named as spillway names the adapters).

As make_fixtures.py does, the model is saved in float32 and the reference
numbers come from a float64 copy of the same weights, rounded to float32
only when stored.

The other mode checks the opposite direction, that PEFT reads an adapter
spillway wrote: give it a LoRA run's checkpoint folder (base weights and
adapter side by side, as `spillway finetune --lora-rank` writes them) and
the logits spillway's Python module gives for some ids
(spillway.Model.load(CHECKPOINT).logits(IDS), saved with numpy.save):

    python3 tests/parity/make_peft_fixtures.py --check-spillway-adapter CHECKPOINT LOGITS.npy IDS_JSON

It loads the base with transformers and the adapter with
PeftModel.from_pretrained, and exits non-zero when the logits differ from
spillway's by more than a relative 1e-5.
"""

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

import safetensors.torch
import torch
from peft import LoraConfig, get_peft_model
from transformers import LlamaConfig, LlamaForCausalLM

OUT = Path(__file__).resolve().parent / "fixtures" / "peft_lora"
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
BATCH, SEQ = 2, 12


def spillway_name(peft_name: str) -> str:
    """base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight
    -> model.layers.0.self_attn.q_proj.lora_A.weight"""
    return peft_name.removeprefix("base_model.model.").replace(".default.", ".")


def make(out: Path) -> None:
    torch.manual_seed(7)
    config = LlamaConfig(vocab_size=61, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         rms_norm_eps=1e-5, tie_word_embeddings=False)
    model = LlamaForCausalLM(config).to(torch.float32)
    (out / "base").mkdir(parents=True, exist_ok=True)
    (out / "adapter").mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out / "base", safe_serialization=True)

    lora = LoraConfig(r=4, lora_alpha=12, lora_dropout=0.0, target_modules=TARGETS, bias="none",
                      task_type="CAUSAL_LM")
    adapted = get_peft_model(model, lora)
    with torch.no_grad():
        for name, p in adapted.named_parameters():
            if "lora_" in name:
                p.copy_(torch.randn_like(p) * 0.2)
    with tempfile.TemporaryDirectory() as tmp:
        adapted.save_pretrained(tmp)
        for f in ("adapter_config.json", "adapter_model.safetensors"):
            shutil.copy(Path(tmp) / f, out / "adapter" / f)

    reference = adapted.to(torch.float64)
    generator = torch.Generator().manual_seed(3)
    tokens = torch.randint(0, config.vocab_size, (BATCH, SEQ), generator=generator)
    targets = torch.randint(0, config.vocab_size, (BATCH, SEQ), generator=generator)
    logits = reference(input_ids=tokens).logits
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, config.vocab_size), targets.reshape(-1))
    loss.backward()
    expected = {
        "tokens": tokens.to(torch.int32),
        "targets": targets.to(torch.int32),
        "logits": logits.detach().to(torch.float32),
        "loss": loss.detach().reshape(1).to(torch.float32),
    }
    grads = 0
    for name, p in reference.named_parameters():
        if "lora_" in name:
            expected["grad." + spillway_name(name)] = p.grad.to(torch.float32)
            grads += 1
        elif p.grad is not None:
            sys.exit(f"{name} got a gradient: PEFT should have frozen it")
    safetensors.torch.save_file({k: v.contiguous() for k, v in expected.items()}, str(out / "expected.safetensors"))
    print(f"wrote {out}: loss {loss.item():.6f}, {grads} adapter gradients; peft {__import__('peft').__version__}, "
          f"transformers {__import__('transformers').__version__}, torch {torch.__version__}")


def check_spillway_adapter(checkpoint: Path, logits_npy: Path, ids_json: Path) -> None:
    import json

    import numpy
    from peft import PeftModel

    # transformers would load an adapter it finds beside the weights by
    # itself: the base and the adapter go to folders of their own.
    with tempfile.TemporaryDirectory() as tmp:
        base_dir, adapter_dir = Path(tmp) / "base", Path(tmp) / "adapter"
        base_dir.mkdir()
        adapter_dir.mkdir()
        for f in ("config.json", "model.safetensors"):
            shutil.copy(checkpoint / f, base_dir / f)
        for f in ("adapter_config.json", "adapter_model.safetensors"):
            shutil.copy(checkpoint / f, adapter_dir / f)
        base = LlamaForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
        model = PeftModel.from_pretrained(base, adapter_dir)
        ids = torch.tensor([json.loads(ids_json.read_text())["ids"]])
        with torch.no_grad():
            theirs = model(input_ids=ids).logits[0].double()
    ours = torch.from_numpy(numpy.load(logits_npy)).double()
    rel = ((theirs - ours).norm() / ours.norm()).item()
    print(f"{checkpoint}: PEFT's logits against spillway's: relative difference {rel:.3g}; "
          f"peft {__import__('peft').__version__}, transformers {__import__('transformers').__version__}")
    sys.exit(0 if rel <= 1e-5 else 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", type=Path, default=OUT)
    parser.add_argument("--check-spillway-adapter", nargs=3, type=Path, metavar=("CHECKPOINT", "LOGITS_NPY", "IDS_JSON"))
    args = parser.parse_args()
    if args.check_spillway_adapter:
        check_spillway_adapter(*args.check_spillway_adapter)
    else:
        make(args.out)


if __name__ == "__main__":
    main()
