# A Hugging Face model folder of a LLaMA shape with random bf16 weights and
# a byte-level BPE tokenizer covering the whole vocabulary, for serving
# measurements where no real checkpoint can be downloaded
# (bench/gpu_decode.sh's `serve` phase: `spillway serve` under
# bench/serve_load.py). The weights are transformers' own initialization
# (bench/torch_decode.py's make_model), so PyTorch's baseline and spillway
# read the same numbers.
#
# The tokenizer: the 256 bytes, then two-byte tokens, then three-byte ones
# (each a merge of the token one byte shorter with a byte), until the
# model's vocabulary is full, so every id the random model can emit decodes
# to text. Its last id is the end-of-text token.
#   python bench/make_random_model.py --shape llama3-8b --out /tmp/llama3-8b-random [--device cuda]
import argparse, itertools, json, os, sys

from torch_decode import SHAPES, make_model


def byte_level_tokenizer(vocab_size):
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from tokenizers.pre_tokenizers import ByteLevel
    alphabet = ByteLevel.alphabet()  # the 256 bytes as the byte-level pre-tokenizer spells them
    alphabet.sort()
    vocab, merges = {b: i for i, b in enumerate(alphabet)}, []
    def add(left, right):
        if len(vocab) >= vocab_size - 1:  # the last id is the end-of-text token
            return False
        vocab[left + right] = len(vocab)
        merges.append((left, right))
        return True
    for a, b in itertools.product(alphabet, alphabet):
        if not add(a, b): break
    if len(vocab) < vocab_size - 1:
        for (a, b), c in itertools.product(itertools.product(alphabet, alphabet), alphabet):
            if not add(a + b, c): break
    vocab["<|end_of_text|>"] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken("<|end_of_text|>", special=True)])
    return tok


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--shape", default="llama3-8b", choices=SHAPES)
    p.add_argument("--out", required=True)
    p.add_argument("--device", default="cpu")
    a = p.parse_args()
    model, config = make_model(a.shape, a.device)
    eos = config.vocab_size - 1
    model.config.bos_token_id = None
    model.config.eos_token_id = eos
    model.generation_config.eos_token_id = eos
    model.save_pretrained(a.out, safe_serialization=True)
    tok = byte_level_tokenizer(config.vocab_size)
    assert tok.get_vocab_size() == config.vocab_size, (tok.get_vocab_size(), config.vocab_size)
    tok.save(os.path.join(a.out, "tokenizer.json"))
    with open(os.path.join(a.out, "tokenizer_config.json"), "w") as f:
        json.dump({"eos_token": "<|end_of_text|>", "add_bos_token": False,
                   "tokenizer_class": "PreTrainedTokenizerFast"}, f)
    print(f"{a.out}: {a.shape} random bf16 weights, byte-level tokenizer of {config.vocab_size} ids")
    return 0


if __name__ == "__main__":
    sys.exit(main())
