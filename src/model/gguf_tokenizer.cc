#include "model/gguf_tokenizer.h"

#include <cstring>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "model/pre_tokenizer.h"
#include "model/bpe_tokenizer.h"
#include "model/sentencepiece_tokenizer.h"
#include "model/tokenizer_json.h"
#include "model/unicode_text.h"

namespace spillway {

namespace {

using nlohmann::ordered_json;

// llama.cpp's token types, which are SentencePiece's.
constexpr int64_t kControl = 3, kUserDefined = 4;

// Qwen2's pre-tokenizer pattern (its tokenizer.json).
constexpr std::string_view kQwen2Pattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
    "\\s+(?!\\S)|\\s+";

ordered_json byte_level(bool use_regex) {
  return {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", use_regex}};
}

ordered_json split_then_bytes(std::string_view pattern) {
  return {{"type", "Sequence"},
          {"pretokenizers",
           {{{"type", "Split"}, {"pattern", {{"Regex", pattern}}}, {"behavior", "Isolated"}, {"invert", false}},
            byte_level(false)}}};
}

ordered_json smollm_pre_tokenizer() {
  return {{"type", "Sequence"},
          {"pretokenizers", {{{"type", "Digits"}, {"individual_digits", true}}, byte_level(true)}}};
}

// A gpt2 GGUF's tokens and merges are byte-level symbols, which are always
// UTF-8: other bytes are a damaged file, and JSON (tokenizer.json) cannot
// hold them.
void require_utf8(const GgufFile& f, const char* key, const std::vector<std::string>& texts) {
  for (size_t i = 0; i < texts.size(); ++i) {
    for (size_t at = 0; at < texts[i].size();) {
      int32_t code = 0;
      at += unicode::char_length(texts[i], at, &code);
      SPW_CHECK(code >= 0, f.path(), "metadata '", key, "' entry ", i, " is not valid UTF-8");
    }
  }
}

std::vector<int64_t> token_types(const GgufFile& f, size_t count) {
  if (!f.find("tokenizer.ggml.token_type")) return std::vector<int64_t>(count, 1);
  std::vector<int64_t> types = f.get_int_array("tokenizer.ggml.token_type");
  SPW_CHECK(types.size() == count, f.path(), "tokenizer.ggml.token_type lists ", types.size(), " types for ", count,
            " tokens");
  return types;
}

TokenRoles gguf_roles(const GgufFile& f, bool add_bos_by_default) {
  TokenRoles r;
  const auto id = [&](const char* key) -> std::optional<int32_t> {
    const std::optional<int64_t> v = f.int_or_none(key);
    if (!v) return std::nullopt;
    // Cast unchecked, 2^32 + 1 would become token 1.
    SPW_CHECK(*v >= 0 && *v <= INT32_MAX, f.path(), "metadata '", key, "' is ", *v, ", not a token id");
    return static_cast<int32_t>(*v);
  };
  r.bos = id("tokenizer.ggml.bos_token_id");
  r.eos = id("tokenizer.ggml.eos_token_id");
  r.pad = id("tokenizer.ggml.padding_token_id");
  r.unk = id("tokenizer.ggml.unknown_token_id");
  for (const char* key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
    if (auto v = id(key); v && std::find(r.stops.begin(), r.stops.end(), *v) == r.stops.end()) r.stops.push_back(*v);
  }
  r.add_bos = f.find("tokenizer.ggml.add_bos_token") ? f.get_bool("tokenizer.ggml.add_bos_token") : add_bos_by_default;
  r.add_eos = f.find("tokenizer.ggml.add_eos_token") && f.get_bool("tokenizer.ggml.add_eos_token");
  if (f.find("tokenizer.chat_template")) r.chat_template = f.get_string("tokenizer.chat_template");
  return r;
}

// --- SentencePiece: the ModelProto, written with protobuf's wire format ----

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7F) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
}
void put_tag(std::string& out, int field, int wire) { put_varint(out, static_cast<uint64_t>(field) << 3 | wire); }
void put_bytes(std::string& out, int field, std::string_view bytes) {
  put_tag(out, field, 2);
  put_varint(out, bytes.size());
  out.append(bytes);
}
void put_int(std::string& out, int field, int64_t v) {
  put_tag(out, field, 0);
  put_varint(out, static_cast<uint64_t>(v));
}
void put_float(std::string& out, int field, float v) {
  put_tag(out, field, 5);
  char b[4];
  std::memcpy(b, &v, 4);
  out.append(b, 4);
}

std::string sentencepiece_proto(const GgufFile& f) {
  const std::vector<std::string> tokens = f.get_string_array("tokenizer.ggml.tokens");
  const std::vector<int64_t> types = token_types(f, tokens.size());
  std::vector<double> scores(tokens.size(), 0.0);
  if (f.find("tokenizer.ggml.scores")) scores = f.get_float_array("tokenizer.ggml.scores");
  SPW_CHECK(scores.size() == tokens.size(), f.path(), "tokenizer.ggml.scores lists ", scores.size(), " scores for ",
            tokens.size(), " tokens");
  std::string proto;
  bool byte_fallback = false;
  for (size_t i = 0; i < tokens.size(); ++i) {
    std::string piece;
    put_bytes(piece, 1, tokens[i]);
    put_float(piece, 2, static_cast<float>(scores[i]));
    const int64_t type = types[i] >= 1 && types[i] <= 6 ? types[i] : 1;
    put_int(piece, 3, type);
    byte_fallback = byte_fallback || type == 6;
    put_bytes(proto, 1, piece);
  }
  std::string trainer;
  put_int(trainer, 3, 2);  // model_type: BPE
  put_int(trainer, 4, static_cast<int64_t>(tokens.size()));
  put_int(trainer, 35, byte_fallback ? 1 : 0);
  put_int(trainer, 40, f.int_or_none("tokenizer.ggml.unknown_token_id").value_or(0));
  put_int(trainer, 41, f.int_or_none("tokenizer.ggml.bos_token_id").value_or(-1));
  put_int(trainer, 42, f.int_or_none("tokenizer.ggml.eos_token_id").value_or(-1));
  put_int(trainer, 43, f.int_or_none("tokenizer.ggml.padding_token_id").value_or(-1));
  put_bytes(proto, 2, trainer);
  std::string normalizer;
  put_bytes(normalizer, 1, "identity");
  const bool prefix = !f.find("tokenizer.ggml.add_space_prefix") || f.get_bool("tokenizer.ggml.add_space_prefix");
  put_int(normalizer, 3, prefix ? 1 : 0);
  put_int(normalizer, 4, 0);  // remove_extra_whitespaces
  put_int(normalizer, 5, 1);  // escape_whitespaces
  put_bytes(proto, 3, normalizer);
  return proto;
}

}  // namespace

std::string gguf_tokenizer_json(const GgufFile& f) {
  const std::string kind = f.get_string("tokenizer.ggml.model");
  SPW_CHECK(kind == "gpt2", f.path(), "tokenizer.ggml.model is '", kind, "', which has no tokenizer.json form here");
  const std::vector<std::string> tokens = f.get_string_array("tokenizer.ggml.tokens");
  const std::vector<int64_t> types = token_types(f, tokens.size());
  const std::string pre = f.find("tokenizer.ggml.pre") ? f.get_string("tokenizer.ggml.pre") : "default";

  ordered_json root;
  root["version"] = "1.0";
  root["truncation"] = nullptr;
  root["padding"] = nullptr;
  ordered_json added = ordered_json::array();
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (types[i] != kControl && types[i] != kUserDefined) continue;
    added.push_back({{"id", i}, {"content", tokens[i]}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                     {"normalized", types[i] != kControl}, {"special", types[i] == kControl}});
  }
  root["added_tokens"] = std::move(added);
  root["normalizer"] = nullptr;
  bool ignore_merges = false;
  if (pre == "smollm") {
    root["pre_tokenizer"] = smollm_pre_tokenizer();
  } else if (pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3") {
    root["pre_tokenizer"] = split_then_bytes(kLlama3Pattern);
    ignore_merges = true;
  } else if (pre == "qwen2") {
    root["normalizer"] = {{"type", "NFC"}};
    root["pre_tokenizer"] = split_then_bytes(kQwen2Pattern);
  } else if (pre == "default" || pre == "gpt-2" || pre == "gpt2") {
    root["pre_tokenizer"] = byte_level(true);
  } else {
    throw Error(f.path(), "tokenizer.ggml.pre is '" + pre +
                              "'; spillway knows smollm, llama-bpe, qwen2 and gpt-2 (default) pre-tokenizers");
  }
  root["post_processor"] = nullptr;
  root["decoder"] = byte_level(true);
  ordered_json vocab = ordered_json::object();
  for (size_t i = 0; i < tokens.size(); ++i) vocab[tokens[i]] = i;
  require_utf8(f, "tokenizer.ggml.tokens", tokens);
  ordered_json merges = ordered_json::array();
  if (f.find("tokenizer.ggml.merges")) {
    const std::vector<std::string> merge_texts = f.get_string_array("tokenizer.ggml.merges");
    require_utf8(f, "tokenizer.ggml.merges", merge_texts);
    for (const std::string& m : merge_texts) merges.push_back(m);
  }
  root["model"] = {{"type", "BPE"},          {"dropout", nullptr},          {"unk_token", nullptr},
                   {"continuing_subword_prefix", nullptr}, {"end_of_word_suffix", nullptr},
                   {"fuse_unk", false},      {"byte_fallback", false},      {"ignore_merges", ignore_merges},
                   {"vocab", std::move(vocab)}, {"merges", std::move(merges)}};
  return root.dump(2) + "\n";
}

namespace {

// llama.cpp's name of a byte-level BPE's pre-tokenizer; nullopt when it has none.
std::optional<std::string> pre_name(const BpeVocab& v) {
  if (v.pre_tokenizer.empty() && v.normalizer.empty()) {
    if (v.pattern == kLlama3Pattern) return "llama-bpe";
    if (v.pattern == kGpt2Pattern) return "gpt-2";
    return std::nullopt;
  }
  const nlohmann::json pre = nlohmann::json::parse(v.pre_tokenizer.empty() ? "null" : v.pre_tokenizer);
  const nlohmann::json norm = nlohmann::json::parse(v.normalizer.empty() ? "null" : v.normalizer);
  const auto same = [](const nlohmann::json& a, const ordered_json& b) { return a == nlohmann::json::parse(b.dump()); };
  if (norm.is_null() && same(pre, smollm_pre_tokenizer())) return "smollm";
  if (norm == nlohmann::json{{"type", "NFC"}} && v.pre_tokenizer.empty() && v.pattern == kQwen2Pattern) return "qwen2";
  return std::nullopt;
}

}  // namespace

void add_gguf_tokenizer(GgufWriter& w, const Tokenizer& tok) {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  if (const auto* bpe = dynamic_cast<const BpeTokenizer*>(&tok)) {
    const BpeVocab& v = bpe->vocab();
    const std::optional<std::string> pre = v.byte_level ? pre_name(v) : std::nullopt;
    SPW_CHECK(pre.has_value(), "tokenizer",
              "has a pre-tokenizer llama.cpp has no name for (it knows LLaMA-3's, GPT-2's, SmolLM's and Qwen2's "
              "byte-level BPE); write a model folder instead");
    w.add_string("tokenizer.ggml.model", "gpt2");
    w.add_string("tokenizer.ggml.pre", *pre);
    for (int32_t id = 0; id < tok.vocab_size(); ++id) {
      tokens.push_back(tok.token_text(id));
      types.push_back(bpe->is_special(id) ? kControl : 1);
    }
    for (const SpecialToken& s : v.specials) {
      if (!s.special) types[s.id] = kUserDefined;
    }
    std::vector<std::string> merges;
    for (const auto& [left, right] : v.merges) merges.push_back(tok.token_text(left) + " " + tok.token_text(right));
    w.add_strings("tokenizer.ggml.tokens", tokens);
    w.add_i32s("tokenizer.ggml.token_type", types);
    w.add_strings("tokenizer.ggml.merges", merges);
  } else if (const auto* sp = dynamic_cast<const SentencePieceTokenizer*>(&tok)) {
    std::vector<float> scores;
    for (int32_t id = 0; id < tok.vocab_size(); ++id) {
      tokens.push_back(sp->piece(id));
      scores.push_back(sp->score(id));
      types.push_back(sp->piece_type(id));
    }
    w.add_string("tokenizer.ggml.model", "llama");
    w.add_strings("tokenizer.ggml.tokens", tokens);
    w.add_f32s("tokenizer.ggml.scores", scores);
    w.add_i32s("tokenizer.ggml.token_type", types);
  } else {
    throw Error("tokenizer", "of kind " + std::string(tok.kind()) + " has no GGUF form");
  }
  const TokenRoles& r = tok.roles();
  if (r.bos) w.add_u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(*r.bos));
  if (r.eos) w.add_u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(*r.eos));
  if (r.unk) w.add_u32("tokenizer.ggml.unknown_token_id", static_cast<uint32_t>(*r.unk));
  if (r.pad) w.add_u32("tokenizer.ggml.padding_token_id", static_cast<uint32_t>(*r.pad));
  // An end-of-turn token besides the EOS (llama.cpp keeps one).
  for (int32_t id : r.stops) {
    if (!r.eos || id != *r.eos) {
      w.add_u32("tokenizer.ggml.eot_token_id", static_cast<uint32_t>(id));
      break;
    }
  }
  w.add_bool("tokenizer.ggml.add_bos_token", r.add_bos);
  w.add_bool("tokenizer.ggml.add_eos_token", r.add_eos);
  if (!r.chat_template.empty()) w.add_string("tokenizer.chat_template", r.chat_template);
}

std::unique_ptr<Tokenizer> load_gguf_tokenizer(const GgufFile& f) {
  SPW_CHECK(f.find("tokenizer.ggml.model"), f.path(), "carries no tokenizer (no tokenizer.ggml.model)");
  const std::string kind = f.get_string("tokenizer.ggml.model");
  std::unique_ptr<Tokenizer> tokenizer;
  if (kind == "gpt2") {
    tokenizer = std::make_unique<BpeTokenizer>(parse_tokenizer_json(gguf_tokenizer_json(f), f.path()));
  } else if (kind == "llama") {
    tokenizer = std::make_unique<SentencePieceTokenizer>(
        SentencePieceTokenizer::from_serialized(sentencepiece_proto(f), f.path()));
  } else {
    throw Error(f.path(), "tokenizer.ggml.model is '" + kind + "'; spillway reads gpt2 (BPE) and llama (SentencePiece)");
  }
  tokenizer->set_roles(gguf_roles(f, kind == "llama"));
  return tokenizer;
}

}  // namespace spillway
