#!/usr/bin/env python3
"""Reference outputs of Hugging Face transformers and tokenizers, written as
small fixture folders that tests/parity/hf_parity_test.cc compares spillway
against. The fixtures are committed; rerun this only to regenerate them.

Needs torch, transformers, safetensors and tokenizers (CPU is enough). From
the repository root:

    /tmp/torchenv/bin/python tests/parity/make_fixtures.py

writes tests/parity/fixtures/{llama_gqa_llama3_rope,llama_tied_default_rope,
tokenizer}/. The other mode checks the opposite direction, that transformers
reads a checkpoint spillway wrote: run the parity test with
SPILLWAY_PARITY_CHECKPOINT_DIR=DIR set (it writes DIR/untied and DIR/tied,
each holding config.json, model.safetensors and logits.safetensors), then

    /tmp/torchenv/bin/python tests/parity/make_fixtures.py \\
        --check-spillway-checkpoint DIR/untied DIR/tied

It exits non-zero when a folder does not load or its logits differ from
spillway's by more than a relative 1e-5.

How the references are made: the model is created and saved in float32 and
the reference numbers (logits, loss, gradients, the AdamW step) come from a
float64 copy of that same model, rounded to float32 only when stored, so the
fixture carries transformers' answer without transformers' own float32
rounding. transformers still rounds a few intermediates to float32 inside its
float64 path (RMSNorm upcasts "to float32", eager attention's softmax runs in
float32, RoPE's cos/sin are float32), which bounds the reference's accuracy at
about 1e-7 relative; the script prints how far float32 transformers is from
it. Greedy generation runs the float32 model through generate() as a user
would, and the prompt is chosen so that every step's winning logit leads the
runner-up by a margin far above float32 rounding, so the tokens do not hinge
on rounding order.
"""

import argparse
import copy
import json
import math
import random
import sys
from pathlib import Path

import safetensors
import safetensors.torch
import tokenizers
import torch
import transformers
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM

FIXTURES = Path(__file__).resolve().parent / "fixtures"

BATCH, SEQ = 2, 24
PROMPT_LEN, NEW_TOKENS = 6, 50
# Winning logit over the runner-up at every generated step, in logits'
# units; float32 logits here are off by about 1e-6.
MIN_GREEDY_MARGIN = 1e-4
ADAMW = dict(lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
# See well_conditioned_batch.
MAX_FLOAT32_ADAMW_ERROR = 1e-6
BATCH_TRIES = 40

LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
SPECIAL_TOKENS = [
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
]

MODELS = {
    # Grouped-query attention, LLaMA-3.1's rope scaling, separate lm_head.
    "llama_gqa_llama3_rope": dict(
        seed=1,
        num_key_value_heads=2,
        rope_theta=500000.0,
        rope_scaling={
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 16,
        },
        tie_word_embeddings=False,
    ),
    # Plain multi-head attention, default rope, lm_head tied to the embedding.
    "llama_tied_default_rope": dict(
        seed=2,
        num_key_value_heads=4,
        rope_theta=10000.0,
        rope_scaling=None,
        tie_word_embeddings=True,
    ),
}


def versions():
    return {
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "safetensors_version": safetensors.__version__,
        "tokenizers_version": tokenizers.__version__,
    }


def save_safetensors(tensors, metadata, path):
    """safetensors.torch.save_file, with the header's keys sorted: the library
    writes metadata in hash order, which would change a committed fixture's
    bytes on every run."""
    blob = safetensors.torch.save(tensors, metadata=metadata)
    n = int.from_bytes(blob[:8], "little")
    header = json.loads(blob[8 : 8 + n])
    header["__metadata__"] = dict(sorted(header["__metadata__"].items()))
    text = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    Path(path).write_bytes(len(text).to_bytes(8, "little") + text + blob[8 + n :])


def rel_error(got, want):
    got, want = got.double(), want.double()
    ref = want.norm().item()
    diff = (got - want).norm().item()
    return diff / ref if ref > 0 else diff


# --- models -----------------------------------------------------------------


def llama_config(spec):
    return LlamaConfig(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=160,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=spec["num_key_value_heads"],
        max_position_embeddings=128,
        rms_norm_eps=1e-5,
        rope_theta=spec["rope_theta"],
        rope_scaling=spec["rope_scaling"],
        tie_word_embeddings=spec["tie_word_embeddings"],
        # Wider than the default 0.02 so that logits are far from uniform and
        # gradients far from zero.
        initializer_range=0.1,
        # No end-of-text token: generate() must produce all NEW_TOKENS.
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
        attn_implementation="eager",
    )


def random_model(spec):
    torch.manual_seed(spec["seed"])
    model = LlamaForCausalLM(llama_config(spec)).to(torch.float32)
    # transformers starts every RMSNorm gain at 1; gains away from 1 make a
    # gain applied wrongly (or not at all) show in the logits.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(0.2 * torch.randn_like(p))
    model.eval()
    return model


def legacy_config_json(config_json):
    """transformers 5 writes rope settings as "rope_parameters" (theta inside);
    transformers 4 and the LLaMA checkpoints on the Hub use top-level
    "rope_theta" and "rope_scaling", which transformers 5 still reads. The
    fixture uses the layout both read."""
    c = dict(config_json)
    rope = c.pop("rope_parameters", None)
    if rope is not None:
        rope = dict(rope)
        c["rope_theta"] = rope.pop("rope_theta")
        c["rope_scaling"] = None if rope.get("rope_type", "default") == "default" else rope
    return c


def training_batch(vocab, seed):
    g = torch.Generator().manual_seed(seed)
    stream = torch.randint(0, vocab, (BATCH, SEQ + 1), generator=g)
    tokens = stream[:, :-1].contiguous()
    targets = stream[:, 1:].contiguous()
    targets[1, 5] = -100  # one position the loss does not count
    return tokens, targets


def forward_backward(model, tokens, targets):
    model.zero_grad(set_to_none=True)
    logits = model(input_ids=tokens).logits
    loss = torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=-100
    )
    loss.backward()
    grads = {name: p.grad.detach().clone() for name, p in model.named_parameters()}
    return logits.detach(), loss.detach(), grads


def adamw_step(model):
    """One torch.optim.AdamW step on the gradients already in .grad. Decay
    only on matrices (two parameter groups), as spillway decays."""
    matrices = [p for p in model.parameters() if p.dim() >= 2]
    vectors = [p for p in model.parameters() if p.dim() < 2]
    hyper = dict(ADAMW)
    decay = hyper.pop("weight_decay")
    opt = torch.optim.AdamW(
        [{"params": matrices, "weight_decay": decay}, {"params": vectors, "weight_decay": 0.0}], **hyper
    )
    opt.step()
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def greedy_margins(model64, prompt, generated):
    """Per generated token: the float64 model's winning logit minus its
    runner-up, after checking that the winner is the token generate() chose."""
    seq = torch.cat([prompt, generated])[None, :-1]
    with torch.no_grad():
        logits = model64(input_ids=seq).logits[0, PROMPT_LEN - 1 :]
    top = logits.topk(2, dim=-1)
    if not torch.equal(top.indices[:, 0], generated):
        return None
    return (top.values[:, 0] - top.values[:, 1]).min().item()


def greedy_generation(model, model64, vocab, seed):
    """A prompt whose 50 greedy tokens are well separated from their
    runners-up, and those tokens."""
    for attempt in range(100):
        g = torch.Generator().manual_seed(seed * 1000 + attempt)
        prompt = torch.randint(0, vocab, (PROMPT_LEN,), generator=g)
        with torch.no_grad():
            out = model.generate(
                input_ids=prompt[None],
                attention_mask=torch.ones(1, PROMPT_LEN, dtype=torch.long),
                do_sample=False,
                max_new_tokens=NEW_TOKENS,
            )
        generated = out[0, PROMPT_LEN:]
        assert generated.numel() == NEW_TOKENS, "generate() stopped early"
        margin = greedy_margins(model64, prompt, generated)
        if margin is not None and margin >= MIN_GREEDY_MARGIN:
            return prompt, generated, margin
    raise RuntimeError("no prompt with a clear greedy path in 100 tries")


def reference_step(model, tokens, targets, dtype):
    """Logits, loss, gradients and the parameters after one AdamW step, from
    a copy of `model` in `dtype`."""
    m = copy.deepcopy(model).to(dtype)
    logits, loss, grads = forward_backward(m, tokens, targets)
    after = adamw_step(m)
    return dict(logits=logits, loss=loss, grads=grads, after=after)


def well_conditioned_batch(model, vocab, seed):
    """A batch whose AdamW step float32 arithmetic can reproduce.

    AdamW's first step moves each parameter by lr * g / (|g| + eps): about
    lr * sign(g), except where |g| is within a few float32 roundings of zero
    (or near eps), where the step hinges on digits float32 does not have. So
    the step's float32 error is set by the batch's smallest gradients, not by
    the implementation: over 40 random batches per model, transformers' own
    float32 step lands anywhere from 4e-7 to 1e-3 from its float64 step, past
    1e-5 for 15 to 20 of them, out of reach of any float32 implementation.
    Of BATCH_TRIES batches this keeps those where transformers' float32 step is
    within MAX_FLOAT32_ADAMW_ERROR (10x under the test's 1e-5) and, among them,
    the one whose smallest non-zero gradient element is largest. (Exact zeros,
    the embedding rows of tokens the batch lacks, are zero in any precision.)"""
    best = None
    for attempt in range(BATCH_TRIES):
        batch_seed = seed * 1000 + attempt
        tokens, targets = training_batch(vocab, batch_seed)
        ref64 = reference_step(model, tokens, targets, torch.float64)
        ref32 = reference_step(model, tokens, targets, torch.float32)
        adamw_err = max(rel_error(ref32["after"][n], ref64["after"][n]) for n in ref64["after"])
        smallest = min(g[g != 0].abs().min().item() for g in ref64["grads"].values())
        if adamw_err <= MAX_FLOAT32_ADAMW_ERROR and (best is None or smallest > best["smallest_gradient"]):
            best = dict(batch_seed=batch_seed, tokens=tokens, targets=targets, ref64=ref64, ref32=ref32,
                        float32_adamw_error=adamw_err, smallest_gradient=smallest)
    if best is None:
        raise RuntimeError(f"no batch with a well-conditioned AdamW step in {BATCH_TRIES} tries")
    return best


def write_model_fixture(name, spec):
    folder = FIXTURES / name
    folder.mkdir(parents=True, exist_ok=True)
    model = random_model(spec)
    model.save_pretrained(folder, safe_serialization=True)
    saved = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(legacy_config_json(saved), indent=2, sort_keys=True) + "\n")

    # The reloaded folder must be the model: same weights, same rope.
    reloaded = LlamaForCausalLM.from_pretrained(folder, attn_implementation="eager", dtype=torch.float32)
    for (n1, p1), (n2, p2) in zip(model.named_parameters(), reloaded.named_parameters()):
        assert n1 == n2 and torch.equal(p1, p2), f"{name}: {n1} changed on reload"

    vocab = model.config.vocab_size
    batch = well_conditioned_batch(reloaded, vocab, spec["seed"])
    tokens, targets, ref64, ref32 = batch["tokens"], batch["targets"], batch["ref64"], batch["ref32"]
    model64 = copy.deepcopy(reloaded).to(torch.float64)
    prompt, generated, margin = greedy_generation(reloaded, model64, vocab, spec["seed"])

    tensors = {
        "tokens": tokens.to(torch.int32),
        "targets": targets.to(torch.int32),
        "logits": ref64["logits"].float(),
        "loss": ref64["loss"].float().reshape(1),
        "prompt": prompt.to(torch.int32),
        "generated": generated.to(torch.int32),
    }
    for pname, g in ref64["grads"].items():
        tensors[f"grad.{pname}"] = g.float()
    for pname, p in ref64["after"].items():
        tensors[f"after_adamw.{pname}"] = p.float()
    metadata = versions()
    metadata.update(
        reference="float64 copy of the float32 model, eager attention, rounded to float32 when stored",
        loss_float64=repr(ref64["loss"].item()),
        adamw=json.dumps({**ADAMW, "decay_on": "parameters with 2 or more dimensions"}),
        batch=json.dumps({k: batch[k] for k in ("batch_seed", "float32_adamw_error", "smallest_gradient")}),
        generation=f"generate(do_sample=False, max_new_tokens={NEW_TOKENS}) on the float32 model",
        greedy_min_margin=repr(margin),
    )
    save_safetensors(tensors, metadata, folder / "expected.safetensors")

    loss64, loss32 = ref64["loss"].item(), ref32["loss"].item()
    grad_err = max(rel_error(ref32["grads"][n], ref64["grads"][n]) for n in ref64["grads"])
    print(
        f"{name}: loss {loss64:.6f}; float32 transformers vs its float64 reference: "
        f"logits {rel_error(ref32['logits'], ref64['logits']):.2e}, loss {abs(loss32 - loss64) / loss64:.2e}, "
        f"worst gradient {grad_err:.2e}, worst parameter after AdamW {batch['float32_adamw_error']:.2e} "
        f"(batch {batch['batch_seed']}, smallest gradient {batch['smallest_gradient']:.1e}); "
        f"greedy margin >= {margin:.4f}"
    )


# --- tokenizer --------------------------------------------------------------

TRAINING_TEXT = """\
The quick brown fox jumps over the lazy dog. It's 3:45 pm, and we'll be there by 10.
I'M SURE THEY'RE RIGHT; you've said so, and she'd agree. Don't worry: it isn't far.
Numbers: 1234567890, 3.14159, 2,718,281 and 0x1F; dates like 2024-01-15 or 15/01/2024.
    Indented code: def f(x):\n        return x ** 2  # square
\tTabs\tand  double  spaces,\r\nWindows line ends, and trailing spaces   
Ünïcödé façade, naïve café, São Paulo, Zürich, Kraków, Ελληνικά, русский текст.
日本語のテキストと中文文本，한국어 텍스트. עברית ועוד. العربية أيضا. हिन्दी पाठ.
Emoji 🙂🙂 and 👍🏽 and 👨‍👩‍👧 and flags 🇫🇷🇯🇵; symbols € £ ¥ © ® ™ ½ ² ⅓.
"""

SPECIAL_PIECES = SPECIAL_TOKENS + ["<|begin_of", "<|eot_id|", "|>", "<|", "<|unknown|>"]

FRAGMENTS = [
    "hello", "Hello", "HELLO", " world", "world", "'s", "'S", "'t", "'re", "'ve", "'m", "'ll", "'d",
    "'LL", "n't", "don't", "I'm", "we'll", "they're", "o'clock", "rock'n'roll", "'", "''", "\"",
    " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n ", "\u00a0", "\u3000", "\u2028", "\u200b",
    "\u180e", "\u2009", "\x0b", "\x0c", "\x85",
    "0", "7", "42", "123", "1234", "12345", "3.14", "1,000", "-5", "+1", "1e9", "١٢٣", "½", "²", "Ⅻ",
    ".", ",", "!", "?", "...", "!!", "?!", "--", "—", "…", "(", ")", "[", "]", "{", "}", "<", ">",
    "/", "\\", "|", "@", "#", "$", "%", "^", "&", "*", "_", "=", "+", "~", "`", ";", ":",
    "café", "naïve", "e\u0301", "ﬁ", "Straße", "İstanbul", "ǅ", "日本語", "中文", "한국어", "ไทย",
    "हिन्दी", "עברית", "العربية", "Ελληνικά", "русский",
    "🙂", "👍🏽", "👨‍👩‍👧", "🇫🇷", "❤️", "🏳️‍🌈", "𝔘𝔫𝔦", "\U0010fffd",
    "def", " return", "x**2", "http://example.com/a?b=c", "foo_bar", "fooBar", "CamelCase", "a.b.c",
] + SPECIAL_PIECES

HAND_CASES = [
    "",
    " ",
    "a",
    "Hello world's 12345",
    "I'M here",
    "we'll\r\n",
    "a  b",
    "x\n\n  y",
    "3.14159",
    "¡Hola!",
    "emoji 🙂🙂 ok",
    "tabs\t\tend",
    "end.\n",
    "trailing  ",
    "x\u00a0\u00a0y",
    "日本語123",
    "\u180e's",
    "The quick brown fox jumps over the lazy dog.",
    "   leading spaces",
    "\n\n\n",
    " \t \n \r\n ",
    "0123456789012345",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "'s's's",
    "DON'T YOU'LL WE'D",
    "\x00nul\x00",
    "\x01\x02\x1f\x7f",
    "<|begin_of_text|>Hello<|end_of_text|>",
    "<|begin_of_text|><|begin_of_text|>",
    "<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>",
    "x<|eot_id|>y",
    "<|begin_of_text",
    "<|eot_id|<|eot_id|>",
    "<|<|end_of_text|>|>",
    " <|end_of_text|> ",
    "👨‍👩‍👧‍👦 family",
    "🇫🇷🇯🇵🇺🇸",
    "e\u0301\u0301\u0301",
    "\U0001d518\U0001d52b\U0001d526",
    "Zürich café naïve",
    "mixed日本語and English",
    "1,000,000.00",
    "http://example.com/path?query=1&x=2",
    "    def f(x):\n        return x ** 2\n",
]


def random_cases(count, seed):
    rng = random.Random(seed)
    # Code points from scripts, marks, symbols and spaces, surrogates excluded.
    blocks = [(0x20, 0x7E), (0xA0, 0x17F), (0x300, 0x36F), (0x370, 0x3FF), (0x400, 0x4FF),
              (0x590, 0x6FF), (0x900, 0x97F), (0x2000, 0x206F), (0x3000, 0x30FF), (0x4E00, 0x4FFF),
              (0xAC00, 0xACFF), (0x1F300, 0x1F64F), (0x1F900, 0x1F9FF)]
    cases = []
    while len(cases) < count:
        kind = rng.random()
        if kind < 0.6:
            text = "".join(rng.choice(FRAGMENTS) for _ in range(rng.randint(1, 8)))
        elif kind < 0.85:
            lo, hi = rng.choice(blocks)
            text = "".join(chr(rng.randint(lo, hi)) for _ in range(rng.randint(1, 12)))
        else:
            text = "".join(
                rng.choice(" \t\n\r\u00a0") if rng.random() < 0.3 else rng.choice("ab'1.🙂é")
                for _ in range(rng.randint(1, 16))
            )
        cases.append(text)
    return cases


def llama3_layout_tokenizer():
    """Byte-level BPE in the layout of Meta-Llama-3's tokenizer.json (and of
    spillway's writer): Split(pattern, Isolated) then ByteLevel without its
    own regex, no normalizer or post-processor, ignore_merges, and special
    tokens as added tokens numbered after the BPE vocabulary."""
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600, min_frequency=2, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    corpus = TRAINING_TEXT.splitlines() * 4 + random_cases(1500, seed=11)
    tok.train_from_iterator(corpus, trainer=trainer)
    tok.add_special_tokens(SPECIAL_TOKENS)
    layout = json.loads(tok.to_str())
    assert layout["model"]["ignore_merges"] is True
    assert layout["normalizer"] is None and layout["post_processor"] is None
    return tok


def write_tokenizer_fixture():
    folder = FIXTURES / "tokenizer"
    folder.mkdir(parents=True, exist_ok=True)
    tok = llama3_layout_tokenizer()
    tok.save(str(folder / "tokenizer.json"))
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))

    texts = HAND_CASES + random_cases(2000 - len(HAND_CASES), seed=29)
    cases = []
    for text in texts:
        # Special token texts become their ids ...
        tok.encode_special_tokens = False
        ids = tok.encode(text, add_special_tokens=False).ids
        # ... or are split like any other text.
        tok.encode_special_tokens = True
        ids_plain = tok.encode(text, add_special_tokens=False).ids
        tok.encode_special_tokens = False
        for variant in (ids, ids_plain):
            assert tok.decode(variant, skip_special_tokens=False) == text, f"HF does not round-trip {text!r}"
        cases.append({"text": text, "ids": ids, "ids_special_as_text": ids_plain})

    with_specials = sum(c["ids"] != c["ids_special_as_text"] for c in cases)
    header = {**versions(), "vocab_size": tok.get_vocab_size(), "cases": len(cases)}
    lines = [json.dumps(c, ensure_ascii=False, separators=(",", ":")) for c in cases]
    (folder / "cases.json").write_text(
        '{"about":' + json.dumps(header, separators=(",", ":")) + ',\n"cases":[\n' + ",\n".join(lines) + "\n]}\n",
        encoding="utf-8",
    )
    print(f"tokenizer: vocab {tok.get_vocab_size()}, {len(cases)} strings, {with_specials} with special tokens")


# --- the other direction ----------------------------------------------------


def check_spillway_checkpoint(folder):
    folder = Path(folder)
    model, info = LlamaForCausalLM.from_pretrained(
        folder, attn_implementation="eager", dtype=torch.float32, output_loading_info=True
    )
    problems = [f"{k}: {v}" for k, v in info.items() if v]
    written = safetensors.torch.load_file(str(folder / "logits.safetensors"))
    tokens = written["tokens"].long()
    model64 = model.to(torch.float64)
    with torch.no_grad():
        logits = model64(input_ids=tokens).logits
    err = rel_error(written["logits"], logits)
    rope = getattr(model.config, "rope_parameters", None) or {
        "rope_theta": model.config.rope_theta, **(model.config.rope_scaling or {})
    }
    print(
        f"{folder}: transformers {transformers.__version__} loaded {model.num_parameters()} parameters "
        f"(tied {model.config.tie_word_embeddings}, rope {rope}); logits {tuple(logits.shape)} "
        f"rel error vs spillway {err:.2e}" + (f"; loading info {problems}" if problems else "")
    )
    return err <= 1e-5 and not problems and math.isfinite(err)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check-spillway-checkpoint", nargs="+", metavar="DIR",
                        help="check that transformers loads these spillway-written folders")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.check_spillway_checkpoint:
        ok = [check_spillway_checkpoint(d) for d in args.check_spillway_checkpoint]
        sys.exit(0 if all(ok) else 1)
    for name, spec in MODELS.items():
        write_model_fixture(name, spec)
    write_tokenizer_fixture()


if __name__ == "__main__":
    main()
