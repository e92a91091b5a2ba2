#!/usr/bin/env python3
"""Tokenizers of each LLaMA family's shape, built with Hugging Face
`tokenizers` at test time, and that library's ids for thousands of strings,
for tests/parity/tokenizer_families_test.cc to compare spillway against.

    python tests/parity/tokenizer_families.py OUT [SMOLLM2.gguf]

writes OUT/<family>/tokenizer.json, tokenizer_config.json and cases.json
({"cases": [{"text", "ids", "ids_special_as_text", "decoded"}]}). Each
family's tokenizer.json has the normalizer, pre-tokenizer, decoder and added
tokens as those models publish them, over a small vocabulary trained here:

  llama3      Split(LLaMA-3 pattern) + ByteLevel, ignore_merges, BOS template
  gpt2        ByteLevel with its regex, <|endoftext|> inside model.vocab
  smollm      Digits(individual) + ByteLevel(regex), specials inside model.vocab
  qwen2       NFC, Split(Qwen pattern) + ByteLevel, special and ordinary added tokens
  llama2      Prepend("▁") + Replace(" ", "▁") normalizer, no pre-tokenizer,
              byte_fallback, fuse_unk, Replace/ByteFallback/Fuse/Strip decoder
              (LLaMA-2, TinyLlama, Mistral v0.1 as transformers wrote them)
  mistral     Metaspace(prepend_scheme first, split false), byte_fallback,
              Metaspace decoder (the newer layout), an rstrip added token
  smollm2     SmolLM2-135M's own: the GGUF's 49,152 tokens and merges with the
              model's pre-tokenizer (only when the GGUF is given)

Needs only `tokenizers` (and `gguf` for smollm2); scripts/setup.sh installs
both into .venv.
"""
import json
import random
import sys
import unicodedata
from pathlib import Path

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

STRINGS = 5000
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
         r"|\s*[\r\n]+|\s+(?!\S)|\s+")

WORDS = ("the of and to in is was for on that with as by at from it his an were are which this be or had "
         "not but first one their its new after who they have her she two been other when there all during "
         "into school time may years more most only over city some world would where later up such used many "
         "can state about national out known university united then made").split()
PIECES = ["'s", "'T", "'re", "'VE", "'m", "'ll", "'d", "n't", "\"", "(", ")", "[", "]", "{", "}", "<", ">", "/",
          "\\", "|", "@", "#", "$", "%", "^", "&", "*", "_", "=", "+", "~", "`", ";", ":", ",", ".", "!", "?",
          "...", "--", "—", "…", "0", "7", "42", "123", "2024", "3.14", "1,000", "١٢٣", "½", "²", "Ⅻ",
          " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n ", "\u00a0", "\u3000", "\u2028", "\u200b", "\u2009",
          "\x0b", "\x0c", "\x85", "\x00", "\x04", "\x7f", "café", "naïve", "e\u0301", "ﬁ", "Straße", "İstanbul",
          "ǅ", "Å", "A\u030a", "가", "\u1100\u1161", "日本語", "中文", "한국어", "ไทย", "हिन्दी", "עברית", "العربية",
          "Ελληνικά", "русский", "🙂", "👍🏽", "👨‍👩‍👧", "🇫🇷", "❤️", "𝔘𝔫𝔦", "def f(x):\n    return x ** 2\n",
          "http://example.com/a?b=c", "foo_bar", "fooBar", "CamelCase", "▁", "▁▁x", "<0x41>"]
BLOCKS = [(0x20, 0x7E), (0xA0, 0x17F), (0x300, 0x36F), (0x370, 0x3FF), (0x400, 0x4FF), (0x590, 0x6FF),
          (0x900, 0x97F), (0x1100, 0x11FF), (0x2000, 0x206F), (0x3000, 0x30FF), (0x4E00, 0x4FFF),
          (0xAC00, 0xACFF), (0x1F300, 0x1F64F)]


def corpus(rng, lines):
    out = []
    for _ in range(lines):
        words = [rng.choice(WORDS) for _ in range(rng.randint(3, 14))]
        if rng.random() < 0.5:
            words[rng.randrange(len(words))] = rng.choice(PIECES)
        out.append(" ".join(words))
    return out


def strings(rng, specials, count):
    """Prose, code, unicode, whitespace runs, digits and special tokens inside text."""
    out = ["", " ", "a", "  leading", "trailing  ", "\n\n\n", "x\u00a0\u00a0y", "1234567 89", "a  1", "e\u0301\u0301"]
    for s in specials:
        out += [s, "x" + s + "y", " " + s + " ", s + s, s[:-1], "<" + s]
    while len(out) < count:
        kind = rng.random()
        if kind < 0.45:
            parts = [rng.choice(WORDS) if rng.random() < 0.5 else rng.choice(PIECES) for _ in range(rng.randint(1, 10))]
            text = "".join((" " if rng.random() < 0.6 else "") + p for p in parts)
        elif kind < 0.65:
            lo, hi = rng.choice(BLOCKS)
            text = "".join(chr(rng.randint(lo, hi)) for _ in range(rng.randint(1, 12)))
            text = "".join(c for c in text if unicodedata.category(c) != "Cs")
        elif kind < 0.8:
            text = "".join(rng.choice(" \t\n\r\u00a0ab'1.🙂é") for _ in range(rng.randint(1, 16)))
        else:
            parts = [rng.choice(WORDS + PIECES + specials) for _ in range(rng.randint(1, 8))]
            text = "".join((" " if rng.random() < 0.5 else "") + p for p in parts)
        out.append(text)
    return out[:count]


def byte_level_trainer(vocab, specials):
    return trainers.BpeTrainer(vocab_size=vocab, min_frequency=2, show_progress=False, special_tokens=specials,
                               initial_alphabet=pre_tokenizers.ByteLevel.alphabet())


def llama3(rng):
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(corpus(rng, 3000), byte_level_trainer(700, []))
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
    tok.add_special_tokens(specials)
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.TemplateProcessing(
        single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B",
        special_tokens=[("<|begin_of_text|>", bos)])
    return tok, {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}, specials


def gpt2(rng):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(corpus(rng, 3000), byte_level_trainer(600, ["<|endoftext|>"]))
    return tok, {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"}, ["<|endoftext|>"]


def smollm(rng):
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)])
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(corpus(rng, 3000), byte_level_trainer(650, specials))
    return tok, {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "unk_token": "<|endoftext|>"}, specials


def qwen2(rng):
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(corpus(rng, 3000), byte_level_trainer(700, []))
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok.add_special_tokens(specials)
    tok.add_tokens([AddedToken("<tool_call>", special=False, normalized=False)])
    return tok, {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}, specials + ["<tool_call>"]


def sentencepiece_bpe(rng, legacy):
    """A SentencePiece-style BPE: text vocabulary with "▁" for spaces, <unk>,
    <s>, </s> and the 256 byte tokens first, as LLaMA-2 numbers them."""
    trainer_tok = Tokenizer(models.BPE())
    trainer_tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    trainer_tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="never", split=True)
    trainer = trainers.BpeTrainer(vocab_size=700, min_frequency=2, show_progress=False, limit_alphabet=120)
    trainer_tok.train_from_iterator(corpus(rng, 3000), trainer)
    trained = json.loads(trainer_tok.to_str())["model"]
    head = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    vocab = {t: i for i, t in enumerate(head)}
    for t, _ in sorted(trained["vocab"].items(), key=lambda kv: kv[1]):
        vocab.setdefault(t, len(vocab))
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[tuple(m) if isinstance(m, list) else tuple(m.split(" "))
                                                    for m in trained["merges"]],
                               unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    if legacy:
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
        tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                         decoders.Strip(" ", 1, 0)])
    else:
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
        tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="first", split=False)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in ["<unk>", "<s>", "</s>"]])
    extra = []
    if not legacy:
        tok.add_special_tokens([AddedToken("[INST]", special=True, rstrip=True, normalized=False)])
        extra = ["[INST]"]
    bos = tok.token_to_id("<s>")
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", bos)])
    config = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "add_bos_token": True}
    return tok, config, ["<s>", "</s>", "<unk>"] + extra


def smollm2_from_gguf(path):
    import gguf
    reader = gguf.GGUFReader(path)
    field = lambda key: reader.fields[key].contents()
    tokens, types = field("tokenizer.ggml.tokens"), field("tokenizer.ggml.token_type")
    tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)},
                               merges=[tuple(m.split(" ")) for m in field("tokenizer.ggml.merges")]))
    # SmolLM's own pre-tokenizer (llama.cpp's "smollm"): digits one by one, then GPT-2's split.
    assert field("tokenizer.ggml.pre") == "smollm"
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)])
    tok.decoder = decoders.ByteLevel()
    specials = [t for t, k in zip(tokens, types) if k == 3]
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    return tok, specials


def write_family(out, name, tok, config, specials, seed):
    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    if config is not None:
        (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=1))
    cases = []
    for text in strings(random.Random(seed), specials, STRINGS):
        tok.encode_special_tokens = False
        ids = tok.encode(text, add_special_tokens=False).ids
        tok.encode_special_tokens = True
        plain = tok.encode(text, add_special_tokens=False).ids
        tok.encode_special_tokens = False
        cases.append({"text": text, "ids": ids, "ids_special_as_text": plain,
                      "decoded": tok.decode(ids, skip_special_tokens=False),
                      "with_bos": tok.encode(text).ids})
    (folder / "cases.json").write_text(json.dumps({"family": name, "cases": cases}, ensure_ascii=False))
    print(f"{name}: vocab {tok.get_vocab_size()}, {len(cases)} strings")


def main():
    out = Path(sys.argv[1])
    families = {"llama3": llama3, "gpt2": gpt2, "smollm": smollm, "qwen2": qwen2,
                "llama2": lambda rng: sentencepiece_bpe(rng, legacy=True),
                "mistral": lambda rng: sentencepiece_bpe(rng, legacy=False)}
    for seed, (name, build) in enumerate(families.items()):
        tok, config, specials = build(random.Random(100 + seed))
        write_family(out, name, tok, config, specials, 200 + seed)
    if len(sys.argv) > 2:
        tok, specials = smollm2_from_gguf(sys.argv[2])
        write_family(out, "smollm2", tok, None, specials, 300)


if __name__ == "__main__":
    main()
