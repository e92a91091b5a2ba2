#include "model/sentencepiece_tokenizer.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <utility>

#include "base/regular_file.h"
#include "base/status.h"

#ifdef SPILLWAY_HAS_SENTENCEPIECE
#include <sentencepiece_processor.h>
#endif

namespace spillway {

#ifdef SPILLWAY_HAS_SENTENCEPIECE

namespace {

std::string fnv1a_hex(std::string_view bytes) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (const char c : bytes) {
    hash ^= static_cast<uint8_t>(c);
    hash *= 0x100000001b3ull;
  }
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(hash));
  return hex;
}

}  // namespace

struct SentencePieceTokenizer::Impl {
  std::string path;
  sentencepiece::SentencePieceProcessor processor;
  // Control and unknown pieces ("<s>", "</s>", "<unk>"): the ones whose text
  // allow_special turns into ids, and decode writes as text.
  std::vector<std::pair<std::string, int32_t>> specials;
  std::vector<bool> is_special;
  std::string fingerprint;

  void encode_stretch(std::string_view text, std::vector<int32_t>& out) const {
    if (text.empty()) return;
    std::vector<int> ids;
    const auto status = processor.Encode(text, &ids);
    SPW_CHECK(status.ok(), path, "cannot encode text: ", status.ToString());
    out.insert(out.end(), ids.begin(), ids.end());
  }

  void decode_stretch(const std::vector<int>& ids, std::string& out) const {
    if (ids.empty()) return;
    std::string text;
    const auto status = processor.Decode(ids, &text);
    SPW_CHECK(status.ok(), path, "cannot decode ids: ", status.ToString());
    out += text;
  }
};

SentencePieceTokenizer::SentencePieceTokenizer(const std::string& path) {
  std::error_code ec;
  const std::string odd = non_regular_kind(path);
  SPW_CHECK(odd.empty(), path, "is ", odd, ", not a SentencePiece tokenizer.model");
  SPW_CHECK(std::filesystem::is_regular_file(path, ec), path, "no such file");
  load(path, nullptr);
}

SentencePieceTokenizer SentencePieceTokenizer::from_serialized(const std::string& proto, const std::string& name) {
  SentencePieceTokenizer t;
  t.load(name, &proto);
  return t;
}

void SentencePieceTokenizer::load(const std::string& path, const std::string* proto) {
  impl_ = std::make_unique<Impl>();
  impl_->path = path;
  // The library reports most bad models in its status, but some (a
  // zero-length piece in a unigram model) only by throwing from its trie.
  sentencepiece::util::Status status;
  try {
    status = proto ? impl_->processor.LoadFromSerializedProto(*proto) : impl_->processor.Load(path);
  } catch (const std::exception& e) {
    throw Error(path, std::string("not a SentencePiece model (") + e.what() + ")");
  }
  SPW_CHECK(status.ok(), path, "not a SentencePiece model (", status.ToString(), ")");
  const int size = impl_->processor.GetPieceSize();
  SPW_CHECK(size > 0, path, "SentencePiece model has no pieces");
  impl_->is_special.assign(size, false);
  for (int id = 0; id < size; ++id) {
    if (impl_->processor.IsControl(id) || impl_->processor.IsUnknown(id)) {
      impl_->is_special[id] = true;
      impl_->specials.emplace_back(impl_->processor.IdToPiece(id), id);
    }
  }
  // Longest first, so that a special whose text starts another's loses.
  std::stable_sort(impl_->specials.begin(), impl_->specials.end(),
                   [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  const auto serialized = impl_->processor.serialized_model_proto();
  impl_->fingerprint = fnv1a_hex(serialized);
  TokenRoles roles;
  if (impl_->processor.bos_id() >= 0) roles.bos = impl_->processor.bos_id();
  if (impl_->processor.eos_id() >= 0) roles.eos = impl_->processor.eos_id();
  if (impl_->processor.unk_id() >= 0) roles.unk = impl_->processor.unk_id();
  if (impl_->processor.pad_id() >= 0) roles.pad = impl_->processor.pad_id();
  roles.add_bos = roles.bos.has_value();
  set_roles(roles);
}

SentencePieceTokenizer::~SentencePieceTokenizer() = default;
SentencePieceTokenizer::SentencePieceTokenizer(SentencePieceTokenizer&&) noexcept = default;
SentencePieceTokenizer& SentencePieceTokenizer::operator=(SentencePieceTokenizer&&) noexcept = default;

std::vector<int32_t> SentencePieceTokenizer::encode(std::string_view text, bool allow_special) const {
  std::vector<int32_t> out;
  if (!allow_special) {
    impl_->encode_stretch(text, out);
    return out;
  }
  size_t start = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    const std::pair<std::string, int32_t>* match = nullptr;
    for (const auto& special : impl_->specials) {
      if (!special.first.empty() && text.compare(pos, special.first.size(), special.first) == 0) {
        match = &special;
        break;
      }
    }
    if (match == nullptr) {
      ++pos;
      continue;
    }
    impl_->encode_stretch(text.substr(start, pos - start), out);
    out.push_back(match->second);
    pos += match->first.size();
    start = pos;
  }
  impl_->encode_stretch(text.substr(start), out);
  return out;
}

std::vector<int32_t> SentencePieceTokenizer::encode_with_bos(std::string_view text,
                                                             bool allow_special) const {
  std::vector<int32_t> out{bos_id()};
  const std::vector<int32_t> body = encode(text, allow_special);
  out.insert(out.end(), body.begin(), body.end());
  return out;
}

std::string SentencePieceTokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  std::vector<int> stretch;
  for (const int32_t id : ids) {
    SPW_CHECK(id >= 0 && id < vocab_size(), impl_->path, "token id ", id, " is outside the vocabulary of ",
              vocab_size());
    if (!impl_->is_special[id]) {
      stretch.push_back(id);
      continue;
    }
    impl_->decode_stretch(stretch, out);
    stretch.clear();
    out += impl_->processor.IdToPiece(id);
  }
  impl_->decode_stretch(stretch, out);
  return out;
}

int32_t SentencePieceTokenizer::vocab_size() const { return impl_->processor.GetPieceSize(); }

std::optional<int32_t> SentencePieceTokenizer::token_id(std::string_view text) const {
  const int id = impl_->processor.PieceToId(text);
  // PieceToId answers the unknown id for a piece it lacks.
  if (id < 0 || (id == impl_->processor.unk_id() && impl_->processor.IdToPiece(id) != text)) return std::nullopt;
  return id;
}

std::string SentencePieceTokenizer::serialized_model() const { return impl_->processor.serialized_model_proto(); }

float SentencePieceTokenizer::score(int32_t id) const {
  piece(id);  // range check
  return impl_->processor.GetScore(id);
}

int SentencePieceTokenizer::piece_type(int32_t id) const {
  piece(id);  // range check
  const auto& p = impl_->processor;
  return p.IsUnknown(id) ? 2 : p.IsControl(id) ? 3 : p.IsUnused(id) ? 5 : p.IsByte(id) ? 6 : 1;
}

std::string SentencePieceTokenizer::fingerprint() const { return impl_->fingerprint; }

std::string SentencePieceTokenizer::piece(int32_t id) const {
  SPW_CHECK(id >= 0 && id < vocab_size(), impl_->path, "token id ", id, " is outside the vocabulary of ",
            vocab_size());
  return impl_->processor.IdToPiece(id);
}

#else  // !SPILLWAY_HAS_SENTENCEPIECE

// Without the library no object is ever built, so the members below are
// unreachable; they exist to keep one header for both builds.
struct SentencePieceTokenizer::Impl {};

SentencePieceTokenizer::SentencePieceTokenizer(const std::string& path) {
  throw Error(path, "built without SentencePiece (install libsentencepiece-dev and reconfigure)");
}
SentencePieceTokenizer SentencePieceTokenizer::from_serialized(const std::string&, const std::string& name) {
  throw Error(name, "built without SentencePiece (install libsentencepiece-dev and reconfigure)");
}
SentencePieceTokenizer::~SentencePieceTokenizer() = default;
SentencePieceTokenizer::SentencePieceTokenizer(SentencePieceTokenizer&&) noexcept = default;
SentencePieceTokenizer& SentencePieceTokenizer::operator=(SentencePieceTokenizer&&) noexcept = default;

std::vector<int32_t> SentencePieceTokenizer::encode(std::string_view, bool) const { return {}; }
std::vector<int32_t> SentencePieceTokenizer::encode_with_bos(std::string_view, bool) const { return {}; }
std::string SentencePieceTokenizer::decode(std::span<const int32_t>) const { return {}; }
int32_t SentencePieceTokenizer::vocab_size() const { return 0; }
std::optional<int32_t> SentencePieceTokenizer::token_id(std::string_view) const { return std::nullopt; }
std::string SentencePieceTokenizer::serialized_model() const { return {}; }
float SentencePieceTokenizer::score(int32_t) const { return 0; }
int SentencePieceTokenizer::piece_type(int32_t) const { return 1; }
std::string SentencePieceTokenizer::fingerprint() const { return {}; }
std::string SentencePieceTokenizer::piece(int32_t) const { return {}; }

#endif

}  // namespace spillway
