#!/usr/bin/env python3
"""Writes the seed corpora under fuzz/corpus/<harness>/: one or two small
valid inputs of each format, built here from the formats' descriptions, so
that the fuzzers start from files that get past the first checks. Run it
again after a format changes; the files it writes are committed."""
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def put(harness, name, data):
    folder = os.path.join(HERE, "corpus", harness)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


# --- safetensors -------------------------------------------------------------

def safetensors(tensors, metadata=None):
    """tensors: (name, dtype, shape, bytes); laid out in the given order."""
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def f32(values):
    return struct.pack("<%df" % len(values), *values)


put("safetensors_fuzz", "two_tensors", safetensors(
    [("a", "F32", [2, 2], f32([1, -2, 3.5, 0])), ("b", "BF16", [3], b"\x80\x3f\x00\x40\x00\xc0"),
     ("c", "F16", [], b"\x00\x3c")], {"format": "pt"}))
put("safetensors_fuzz", "ints", safetensors([("ids", "I32", [2], struct.pack("<2i", 7, -1)),
                                            ("x", "F64", [1], struct.pack("<d", 0.5))]))

# --- GGUF --------------------------------------------------------------------

def gguf_string(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def gguf_kv(key, type_code, payload):
    return gguf_string(key) + struct.pack("<I", type_code) + payload


def gguf_string_array(key, items):
    return gguf_kv(key, 9, struct.pack("<IQ", 8, len(items)) + b"".join(gguf_string(i) for i in items))


def gguf(kvs, tensors, version=3, alignment=32):
    """tensors: (name, dims in ggml order, ggml type, bytes)."""
    out = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs)) + b"".join(kvs)
    offsets, at = [], 0
    for _, _, _, raw in tensors:
        offsets.append(at)
        at += len(raw) + (-len(raw) % alignment)
    for (name, dims, type_code, _), offset in zip(tensors, offsets):
        out += gguf_string(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        out += struct.pack("<IQ", type_code, offset)
    out += b"\0" * (-len(out) % alignment)
    for (_, _, _, raw), offset in zip(tensors, offsets):
        out += raw + b"\0" * (-len(raw) % alignment)
    return out


tokens = ["a", "b", "c", "ab", "abc", "Ġ", "Ġa", "<s>", "</s>", "!"]
llama_kvs = [
    gguf_kv("general.architecture", 8, gguf_string("llama")),
    gguf_kv("llama.embedding_length", 4, struct.pack("<I", 8)),
    gguf_kv("llama.feed_forward_length", 4, struct.pack("<I", 16)),
    gguf_kv("llama.block_count", 4, struct.pack("<I", 1)),
    gguf_kv("llama.attention.head_count", 4, struct.pack("<I", 2)),
    gguf_kv("llama.attention.head_count_kv", 4, struct.pack("<I", 1)),
    gguf_kv("llama.context_length", 4, struct.pack("<I", 16)),
    gguf_kv("llama.attention.layer_norm_rms_epsilon", 6, struct.pack("<f", 1e-5)),
    gguf_kv("llama.rope.freq_base", 6, struct.pack("<f", 10000.0)),
    gguf_kv("tokenizer.ggml.model", 8, gguf_string("gpt2")),
    gguf_kv("tokenizer.ggml.pre", 8, gguf_string("llama-bpe")),
    gguf_string_array("tokenizer.ggml.tokens", tokens),
    gguf_kv("tokenizer.ggml.token_type", 9, struct.pack("<IQ", 5, len(tokens)) +
            struct.pack("<%di" % len(tokens), *([1] * 7 + [3, 3, 1]))),
    gguf_string_array("tokenizer.ggml.merges", ["a b", "ab c", "Ġ a"]),
    gguf_kv("tokenizer.ggml.bos_token_id", 4, struct.pack("<I", 7)),
    gguf_kv("tokenizer.ggml.eos_token_id", 4, struct.pack("<I", 8)),
]
q8 = struct.pack("<e", 0.5) + bytes(range(32))
put("gguf_fuzz", "tiny_llama", gguf(llama_kvs, [("token_embd.weight", [8, 10], 0, f32([0.1] * 80)),
                                              ("blk.0.ffn_up.weight", [32, 1], 8, q8)]))
put("gguf_fuzz", "v2_f16", gguf([gguf_kv("general.alignment", 4, struct.pack("<I", 64))],
                                [("w", [4], 1, b"\x00\x3c" * 4), ("v", [2], 30, b"\x80\x3f\x00\x40")],
                                version=2, alignment=64))

# --- config.json -------------------------------------------------------------

put("config_json_fuzz", "llama32_1b", json.dumps({
    "architectures": ["LlamaForCausalLM"], "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 8192,
    "max_position_embeddings": 131072, "num_attention_heads": 32, "num_hidden_layers": 16,
    "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "head_dim": 64,
    "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0, "tie_word_embeddings": True, "vocab_size": 128256}, indent=1))
put("config_json_fuzz", "tiny", json.dumps({
    "hidden_size": 8, "intermediate_size": 16, "num_attention_heads": 2, "num_hidden_layers": 1,
    "num_key_value_heads": 1, "vocab_size": 10, "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
    "attention_bias": False, "mlp_bias": False}))

# --- tokenizer.json (byte-level BPE) -----------------------------------------

def byte_symbols():
    """GPT-2's map of bytes to printable characters."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


sym = byte_symbols()
vocab = {sym[b]: b for b in range(256)}
merges = [("h", "e"), ("l", "l"), ("he", "ll"), ("hell", "o"), (sym[32], "w")]
for left, right in merges:
    vocab.setdefault(left + right, len(vocab))
bos, eos = len(vocab), len(vocab) + 1
tokenizer = {
    "version": "1.0",
    "added_tokens": [{"id": bos, "content": "<s>", "special": True, "normalized": False},
                     {"id": eos, "content": "</s>", "special": True, "normalized": False}],
    "normalizer": {"type": "NFC"},
    "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": "(?i:'s|'t)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+|\\s+"},
         "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
    "post_processor": {"type": "TemplateProcessing",
                       "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                       "special_tokens": {"<s>": {"id": "<s>", "ids": [bos], "tokens": ["<s>"]}}},
    "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
    "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
              "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
              "vocab": vocab, "merges": [[l, r] for l, r in merges]},
}
put("tokenizer_json_fuzz", "byte_level_bpe", json.dumps(tokenizer, ensure_ascii=False))

# A SentencePiece-style BPE (LLaMA-2's tokenizer.json shape): byte fallback,
# ▁ for spaces, merges as strings.
sp_vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
for b in range(256):
    sp_vocab["<0x%02X>" % b] = len(sp_vocab)
for piece in ["▁", "h", "e", "l", "o", "▁h", "▁he", "ll", "▁hell", "▁hello"]:
    sp_vocab[piece] = len(sp_vocab)
put("tokenizer_json_fuzz", "sentencepiece_bpe", json.dumps({
    "version": "1.0",
    "added_tokens": [{"id": i, "content": c, "special": True, "normalized": False}
                     for c, i in [("<unk>", 0), ("<s>", 1), ("</s>", 2)]],
    "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"},
                                                       {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
    "pre_tokenizer": None,
    "post_processor": None,
    "decoder": {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
                                                 {"type": "ByteFallback"}, {"type": "Fuse"},
                                                 {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
    "model": {"type": "BPE", "unk_token": "<unk>", "fuse_unk": True, "byte_fallback": True, "vocab": sp_vocab,
              "merges": ["▁ h", "▁h e", "l l", "▁he ll", "▁hell o"]},
}, ensure_ascii=False))

# --- SentencePiece tokenizer.model (protobuf) --------------------------------

def varint(n):
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def field(number, wire, payload):
    key = varint((number << 3) | wire)
    if wire == 2:
        return key + varint(len(payload)) + payload
    return key + payload


def piece(text, score, kind):
    return field(1, 2, text.encode()) + field(2, 5, struct.pack("<f", score)) + field(3, 0, varint(kind))


NORMAL, UNKNOWN, CONTROL, BYTE = 1, 2, 3, 6


def sentencepiece_model(model_type, pieces):
    body = b"".join(field(1, 2, piece(*p)) for p in pieces)
    trainer = field(3, 0, varint(model_type)) + field(4, 0, varint(len(pieces)))
    if any(p[2] == BYTE for p in pieces):
        trainer += field(35, 0, varint(1))  # byte_fallback
    normalizer = field(1, 2, b"identity") + field(3, 0, varint(1)) + field(4, 0, varint(1)) + field(5, 0, varint(1))
    return body + field(2, 2, trainer) + field(3, 2, normalizer)


specials = [("<unk>", 0.0, UNKNOWN), ("<s>", 0.0, CONTROL), ("</s>", 0.0, CONTROL)]
words = ["▁", "h", "e", "l", "o", "▁h", "▁he", "ll", "▁hello", "▁world"]
put("sentencepiece_fuzz", "unigram", sentencepiece_model(1, specials + [(w, -float(i + 1), NORMAL)
                                                                     for i, w in enumerate(words)]))
put("sentencepiece_fuzz", "bpe_byte_fallback", sentencepiece_model(
    2, specials + [("<0x%02X>" % b, 0.0, BYTE) for b in range(256)] + [(w, -float(i), NORMAL) for i, w in enumerate(words)]))

# --- token files ---------------------------------------------------------------

def token_input(dtype, ids, vocab_size):
    sidecar = json.dumps({"format": "spillway-tokens", "dtype": dtype, "tokens": len(ids), "vocab_size": vocab_size,
                          "tokenizer": "fnv1a:0123456789abcdef"}).encode()
    data = struct.pack("<%d%s" % (len(ids), "H" if dtype == "uint16" else "I"), *ids)
    return bytes([len(sidecar)]) + sidecar + data


put("token_file_fuzz", "uint16", token_input("uint16", [1, 2, 3, 99], 100))
put("token_file_fuzz", "uint32", token_input("uint32", [70000, 5], 128256))

# --- trainer state and optimizer state --------------------------------------

# As save_checkpoint writes it, consistent throughout (3 steps of 2 rows of
# 16 tokens), so that mutations reach the checks of the sampler's position.
trainer_state = {
    "format": "spillway-trainer-state/1", "step": 3, "skipped_steps": 1,
    "sampler": {"draws": 6, "seed": 1337, "tokens_consumed": 96},
    "options": {"schedule": {"steps": 10, "batch": 2, "seq": 16, "grad_accum": 1, "seed": 1337},
                "optimizer": {"lr": 0.001, "warmup": 2}},
    "train_curve": [[1.0, 5.5], [2.0, 5.25], [3.0, 5.0]], "validation_curve": [[2.0, 5.3]]}
put("trainer_state_fuzz", "trainer_state", b"\x00" + json.dumps(trainer_state).encode())
put("trainer_state_fuzz", "trainer_state_windows", b"\x02" + json.dumps(trainer_state).encode())
put("trainer_state_fuzz", "trainer_state_packed", b"\x04" + json.dumps(trainer_state).encode())
put("trainer_state_fuzz", "trainer_state_flat_options", b"\x00" + json.dumps({
    "format": "spillway-trainer-state/1", "step": 3, "sampler": {"draws": 3, "seed": 1337, "tokens_consumed": 30},
    "options": {"steps": 10, "batch": 1, "seq": 16, "lr": 0.001}}).encode())
shapes = [("model.embed_tokens.weight", [8, 8]), ("model.layers.0.input_layernorm.weight", [8]),
          ("model.layers.0.self_attn.q_proj.weight", [8, 8]), ("model.layers.0.self_attn.k_proj.weight", [4, 8]),
          ("model.layers.0.self_attn.v_proj.weight", [4, 8]), ("model.layers.0.self_attn.o_proj.weight", [8, 8]),
          ("model.layers.0.post_attention_layernorm.weight", [8]), ("model.layers.0.mlp.gate_proj.weight", [16, 8]),
          ("model.layers.0.mlp.up_proj.weight", [16, 8]), ("model.layers.0.mlp.down_proj.weight", [8, 16]),
          ("model.norm.weight", [8])]
moments = []
for name, shape in shapes:
    n = 1
    for d in shape:
        n *= d
    moments.append(("exp_avg." + name, "F32", shape, f32([0.01] * n)))
    moments.append(("exp_avg_sq." + name, "F32", shape, f32([0.0001] * n)))
put("trainer_state_fuzz", "optimizer", b"\x01" + safetensors(moments, {"steps_taken": "3"}))

# --- run configuration ---------------------------------------------------------

run_toml = """[model]
config = "tiny"

[data]
paths = ["corpus/"]
separator = "%"
vocab_size = 512

[optimizer]
lr = 3e-4
warmup = 10

[schedule]
steps = 50
batch = 4
seq = 128
grad_accum = 2
checkpoint_every = 25

[memory]
device_mem = "8GiB"
offload = "auto"
"""
put("run_config_fuzz", "train_toml", b"\x01" + run_toml.encode())  # bit 0: TOML; bits 1-2: train
# Non-ASCII text where TOML allows it, beside the multi-line string forms
# whose backslashes make toml++ test characters for whitespace.
put("run_config_fuzz", "text_toml", b"\x01" + """# caf\u00e9 \u3042
[data]
separator = "caf\u00e9 \u0416"
paths = ['\u3042.txt', \"\"\"\\
    \u3000 b\"\"\"]

[run]
out = \"\"\"runs/\\u00e9\\
  x\"\"\"
""".encode())
put("run_config_fuzz", "plan_json", b"\x06" + json.dumps({
    "model": {"config": "llama3-8b"}, "schedule": {"batch": 1, "seq": 8192},
    "memory": {"device_mem": "12GiB", "host_mem": 137438953472, "recompute": "selective"}}).encode())

# --- the server's request bodies ----------------------------------------------
# First byte: bit 0 chat, bits 1-3 the served tokenizer's chat format
# (0 LLaMA-3, 1 ChatML, 2 LLaMA-2, 3 plain, 4 one spillway cannot render).

put("openai_request_fuzz", "chat_llama3", b"\x01" + json.dumps({
    "model": "m", "messages": [{"role": "developer", "content": "Be brief.", "name": "x"},
                               {"role": "user", "content": [{"type": "text", "text": "the cat "},
                                                            {"type": "text", "text": "sees"}]},
                               {"role": "assistant", "content": "the moon"},
                               {"role": "user", "content": "a dog"}],
    "max_tokens": 20, "temperature": 0.5, "top_p": 0.9, "top_k": 4, "seed": 7, "stop": ["\n", "END"], "n": 2,
    "stream": True, "stream_options": {"include_usage": True}, "frequency_penalty": 0, "user": "u1"}).encode())
put("openai_request_fuzz", "chat_chatml", b"\x03" + json.dumps({
    "messages": [{"role": "user", "content": "a dog likes her song"}], "max_completion_tokens": 50,
    "logprobs": False, "response_format": {"type": "text"}, "ignore_eos": True}).encode())
put("openai_request_fuzz", "chat_llama2", b"\x05" + json.dumps({
    "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "12 + 30"}], "seed": -1}).encode())
put("openai_request_fuzz", "completion_text", b"\x00" + json.dumps({
    "model": "m", "prompt": "the cat sees", "max_tokens": 16, "temperature": 0, "stop": "moon", "echo": False,
    "logit_bias": {}, "best_of": 1}).encode())
put("openai_request_fuzz", "completion_prompts", b"\x06" + json.dumps({
    "prompt": ["a dog", "her song"], "n": 3, "top_k": -1, "stream": False, "presence_penalty": 0.0}).encode())
put("openai_request_fuzz", "completion_ids", b"\x00" + json.dumps({
    "prompt": [[1, 2, 3], [40, 41]], "max_tokens": 90, "suffix": None, "top_p": 1}).encode())
