#!/usr/bin/env python3
"""Reads a GGUF file with llama.cpp's own reader (PyPI's `gguf`) and prints
what it found as one JSON object, for tests/e2e/real_model_test.cc to check
what `spillway convert` wrote:

    {"metadata": {key: value, ...}, "tensors": {name: {"type": "BF16", "shape": [...]}}}

Arrays of more than 8 values are given as {"length": n, "head": first 8}.
"""
import json
import sys

import gguf


def value(field):
    contents = field.contents()
    if isinstance(contents, list) and len(contents) > 8:
        return {"length": len(contents), "head": contents[:8]}
    return contents


def main():
    reader = gguf.GGUFReader(sys.argv[1])
    metadata = {key: value(field) for key, field in reader.fields.items() if not key.startswith("GGUF.")}
    tensors = {t.name: {"type": t.tensor_type.name, "shape": [int(d) for d in t.shape]} for t in reader.tensors}
    print(json.dumps({"metadata": metadata, "tensors": tensors}))


if __name__ == "__main__":
    main()
