// Reads and writes Hugging Face's tokenizer.json for byte-level BPE, so that
// `tokenizers.Tokenizer.from_file` loads what spillway trains and spillway
// loads LLaMA-3's tokenizer.
//
// Written: model BPE (vocab in id order, merges as [left, right] pairs),
// special tokens as added_tokens (outside model.vocab, as LLaMA-3 has them),
// pre_tokenizer Sequence[Split(pattern, Isolated), ByteLevel(no regex)],
// decoder ByteLevel, no normalizer and no post_processor (nothing is added
// to the text on encode).
//
// Read: the same, plus merges as "left right" strings, special tokens that
// also sit in model.vocab (GPT-2), a bare ByteLevel pre-tokenizer with
// use_regex (GPT-2's pattern), and ignore_merges. Anything whose meaning
// spillway would not reproduce exactly (a normalizer, another model type or
// pre-tokenizer, non-special or stripping added tokens, dropout, subword
// prefixes) is refused with an Error naming the file and the field. The
// post_processor and decoder are not used: encode never adds tokens, and
// decode is always byte-level.
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
