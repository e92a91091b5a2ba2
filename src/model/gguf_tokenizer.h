// The tokenizer a GGUF file carries (tokenizer.ggml.* metadata), built as the
// model's own tokenizer runs:
//
// - "gpt2" (byte-level BPE): the tokenizer.json Hugging Face ships for the
//   model, made from the token list, the merges and the pre-tokenizer that
//   tokenizer.ggml.pre names (smollm: digits one by one, then GPT-2's
//   split; llama-bpe: LLaMA-3's; qwen2: NFC and Qwen's; gpt-2/default:
//   GPT-2's). Control tokens (type 3) are special added tokens, user-defined
//   ones (type 4) ordinary added tokens.
// - "llama" (SentencePiece): the tokenizer.model the file was made from,
//   rebuilt from the pieces, scores and types and run by SentencePiece.
//
// Roles come from tokenizer.ggml.{bos,eos,eot,eom,padding,unknown}_token_id,
// add_bos_token (default: true for SentencePiece, false for byte-level BPE)
// and tokenizer.chat_template. Errors name the file and the key.
#pragma once

#include <memory>
#include <string>

#include "model/gguf.h"
#include "model/gguf_write.h"
#include "model/tokenizer.h"

namespace spillway {

std::unique_ptr<Tokenizer> load_gguf_tokenizer(const GgufFile& file);

// The tokenizer.json text of a "gpt2" GGUF tokenizer; Error for other kinds.
std::string gguf_tokenizer_json(const GgufFile& file);

// The tokenizer.ggml.* metadata llama.cpp reads for `tokenizer`, the
// inverse of load_gguf_tokenizer: a byte-level BPE whose pre-tokenizer has a
// llama.cpp name (the four above) or a SentencePiece model. Error("tokenizer",
// ...) for one that has no GGUF form.
void add_gguf_tokenizer(GgufWriter& writer, const Tokenizer& tokenizer);

}  // namespace spillway
