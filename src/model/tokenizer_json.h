// Reads and writes Hugging Face's tokenizer.json, so that
// `tokenizers.Tokenizer.from_file` loads what spillway trains and spillway
// loads what LLaMA-family models ship.
//
// Read: model BPE (merges as "left right" strings or [left, right] pairs,
// byte_fallback, unk_token, fuse_unk, ignore_merges), added tokens special or
// not with their lstrip/rstrip/single_word, and the normalizer,
// pre-tokenizer and decoder as normalizer.h, pre_tokenizer_chain.h and
// token_decoder.h read them. The post-processor's template gives the
// tokenizer's BOS (and EOS) roles. What spillway would not reproduce exactly
// (another model type, dropout, subword prefixes, an unknown step) is an
// Error naming the file and the field.
//
// Written: a tokenizer read from a file is written back as that file's text;
// one spillway trained gets model BPE (vocab in id order, merges as pairs),
// special tokens as added_tokens (outside model.vocab, as LLaMA-3 has them),
// pre_tokenizer Sequence[Split(pattern, Isolated), ByteLevel(no regex)],
// decoder ByteLevel, no normalizer and no post_processor.
#pragma once

#include <string>

#include "model/bpe_tokenizer.h"

namespace spillway {

BpeTokenizer load_tokenizer_json(const std::string& path);

// Written whole to a temporary file in the same folder and renamed over
// `path`, so a reader never sees half a file.
void save_tokenizer_json(const BpeTokenizer& tokenizer, const std::string& path);

// The JSON text itself, for callers that store it elsewhere.
std::string tokenizer_json_text(const BpeTokenizer& tokenizer);
BpeTokenizer parse_tokenizer_json(const std::string& text, const std::string& source_name);

}  // namespace spillway
