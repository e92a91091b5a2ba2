// The files beside a tokenizer that say which tokens play which part, read
// and written as transformers does: tokenizer_config.json (bos_token,
// eos_token, add_bos_token, chat_template, ...), generation_config.json and
// config.json (bos_token_id, eos_token_id: one id or a list of stop ids).
#pragma once

#include <string>

#include "model/tokenizer.h"

namespace spillway {

// The tokenizer's own roles, overridden by what the files in `dir` say:
// tokenizer_config.json first, then generation_config.json, then
// config.json, each only where the earlier ones are silent. Every eos id any
// of them names is a stop. A malformed file, or a token name the vocabulary
// lacks, is an Error naming the file and the key.
TokenRoles read_roles(const std::string& dir, const Tokenizer& tokenizer);

// Writes the tokenizer into `dir` as a Hugging Face folder holds it:
// tokenizer.json (BPE) or tokenizer.model (SentencePiece), and
// tokenizer_config.json and generation_config.json with its roles and chat
// template, so that transformers' AutoTokenizer loads it complete. A
// tokenizer_config.json read with the tokenizer is written back unchanged.
// Each file is written atomically.
void save_tokenizer_files(const Tokenizer& tokenizer, const std::string& dir);

// The chat template spillway writes for a tokenizer that has none: each
// message's content followed by the end-of-text token.
inline constexpr const char* kPlainChatTemplate =
    "{% for message in messages %}{{ message['content'] }}{{ eos_token }}{% endfor %}";

}  // namespace spillway
