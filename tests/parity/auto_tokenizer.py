#!/usr/bin/env python3
"""What transformers' AutoTokenizer makes of a folder spillway wrote (a
checkpoint, or `spillway convert`'s output), for
tests/e2e/checkpoint_tokenizer_test.cc to compare with spillway's own
tokenizer:

    python tests/parity/auto_tokenizer.py FOLDER TEXTS.json OUT.json

TEXTS.json is a list of strings; OUT.json gets the tokenizer's class, its
size, its BOS and EOS tokens, tokenizer(text)["input_ids"] for each text
(special tokens inside a text found, as transformers does by default), and
the chat template applied to one user message. Needs only `transformers`
(without torch) and `jinja2`; scripts/setup.sh installs them into .venv.
"""
import json
import os
import sys

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
from transformers import AutoTokenizer  # noqa: E402


def main():
    folder, texts_path, out_path = sys.argv[1:4]
    with open(texts_path, encoding="utf-8") as f:
        texts = json.load(f)
    tok = AutoTokenizer.from_pretrained(folder)
    out = {
        "class": type(tok).__name__,
        "size": len(tok),
        "bos_token": tok.bos_token,
        "eos_token": tok.eos_token,
        "ids": [tok(t)["input_ids"] for t in texts],
        "chat": tok.apply_chat_template([{"role": "user", "content": "Hi there"}], tokenize=False),
    }
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False)


if __name__ == "__main__":
    main()
