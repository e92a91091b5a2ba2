#include "train/token_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

#include "base/checked_math.h"
#include "base/json_text.h"
#include "base/limits.h"
#include "base/regular_file.h"
#include "base/status.h"

namespace spillway {

static_assert(std::endian::native == std::endian::little,
              "token files are little-endian and are read by mapping them");

namespace {

constexpr size_t kBufferBytes = 1 << 20;
constexpr const char* kFormat = "spillway-tokens";

const char* dtype_name(TokenDType d) { return d == TokenDType::u16 ? "uint16" : "uint32"; }
size_t dtype_bytes(TokenDType d) { return d == TokenDType::u16 ? 2 : 4; }

std::string errno_text() { return std::strerror(errno); }

}  // namespace

TokenDType token_dtype_for(int64_t vocab_size) {
  SPW_CHECK(vocab_size > 0 && vocab_size <= (int64_t{1} << 32), "token file", "vocabulary of ", vocab_size,
            " tokens");
  return vocab_size <= 65536 ? TokenDType::u16 : TokenDType::u32;
}

std::string token_sidecar_path(const std::string& path) { return path + ".json"; }

// --- writing ---------------------------------------------------------------

TokenFileWriter::TokenFileWriter(std::string path, int64_t vocab_size, std::string tokenizer_fingerprint)
    : path_(std::move(path)),
      vocab_size_(vocab_size),
      fingerprint_(std::move(tokenizer_fingerprint)),
      dtype_(token_dtype_for(vocab_size)),
      data_(path_) {
  buffer_.reserve(kBufferBytes);
}

void TokenFileWriter::append(std::span<const int32_t> ids) {
  SPW_CHECK(data_.is_open(), path_, "append after the write was committed or abandoned");
  const size_t width = dtype_bytes(dtype_);
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    if (id < 0 || id >= vocab_size_) {
      data_.abandon();
      throw Error(path_, "token " + std::to_string(tokens_ + i) + " is " + std::to_string(id) +
                             ", outside the vocabulary of " + std::to_string(vocab_size_) + " tokens");
    }
    const auto value = static_cast<uint32_t>(id);
    const size_t at = buffer_.size();
    buffer_.resize(at + width);
    std::memcpy(buffer_.data() + at, &value, width);  // little-endian: the low bytes first
    if (buffer_.size() + width > kBufferBytes) flush();
  }
  tokens_ += ids.size();
}

void TokenFileWriter::flush() {
  data_.write(buffer_.data(), buffer_.size());
  buffer_.clear();
}

void TokenFileWriter::commit() {
  SPW_CHECK(data_.is_open(), path_, "commit after the write was committed or abandoned");
  try {
    flush();
    const nlohmann::ordered_json sidecar_json = {{"format", kFormat},
                                                 {"dtype", dtype_name(dtype_)},
                                                 {"tokens", tokens_},
                                                 {"vocab_size", vocab_size_},
                                                 {"tokenizer", fingerprint_}};
    const std::string text = sidecar_json.dump(2) + "\n";
    AtomicFile sidecar(token_sidecar_path(path_));
    sidecar.write(text.data(), text.size());
    data_.commit();
    try {
      sidecar.commit();
    } catch (...) {
      ::unlink(path_.c_str());  // data without its sidecar would be unreadable
      throw;
    }
  } catch (...) {
    data_.abandon();
    throw;
  }
}

void write_token_file(const std::string& path, std::span<const int32_t> ids, int64_t vocab_size,
                      const std::string& tokenizer_fingerprint) {
  TokenFileWriter writer(path, vocab_size, tokenizer_fingerprint);
  writer.append(ids);
  writer.commit();
}

// --- reading ---------------------------------------------------------------

TokenFile::TokenFile(std::string path) : path_(std::move(path)) {
  const std::string sidecar_path = token_sidecar_path(path_);
  const std::string odd_sidecar = non_regular_kind(sidecar_path);
  SPW_CHECK(odd_sidecar.empty(), sidecar_path, "is ", odd_sidecar, ", not a token file's sidecar");
  std::ifstream sidecar_in(sidecar_path);
  if (!sidecar_in) {
    throw Error(path_, "its sidecar " + sidecar_path + " cannot be opened (" + errno_text() +
                           "); it records the dtype, length and tokenizer and is written with the data");
  }
  std::ostringstream sidecar_text;
  sidecar_text << sidecar_in.rdbuf();
  const nlohmann::json sidecar = json_from_text(sidecar_text.str(), sidecar_path);
  const auto field = [&](const char* key, bool (nlohmann::json::*is_type)() const noexcept,
                         const char* kind) -> const nlohmann::json& {
    SPW_CHECK(sidecar.is_object() && sidecar.contains(key), sidecar_path, "missing field ", key);
    const nlohmann::json& value = sidecar[key];
    SPW_CHECK((value.*is_type)(), sidecar_path, "field ", key, " is not ", kind);
    return value;
  };
  SPW_CHECK(field("format", &nlohmann::json::is_string, "a string") == kFormat, sidecar_path,
            "format is not ", kFormat);
  const std::string dtype = field("dtype", &nlohmann::json::is_string, "a string").get<std::string>();
  SPW_CHECK(dtype == "uint16" || dtype == "uint32", sidecar_path, "dtype ", dtype,
            " is not uint16 or uint32");
  dtype_ = dtype == "uint16" ? TokenDType::u16 : TokenDType::u32;
  tokens_ = field("tokens", &nlohmann::json::is_number_unsigned, "a count").get<uint64_t>();
  SPW_CHECK(tokens_ <= limits::kMaxTokenFileTokens, sidecar_path, "tokens is ", tokens_, "; at most ",
            limits::kMaxTokenFileTokens);
  const uint64_t vocab = field("vocab_size", &nlohmann::json::is_number_unsigned, "a count").get<uint64_t>();
  SPW_CHECK(vocab >= 1 && vocab <= (uint64_t{1} << 32), sidecar_path, "vocab_size is ", vocab,
            "; must be 1 to 4294967296");
  vocab_size_ = static_cast<int64_t>(vocab);
  SPW_CHECK(token_dtype_for(vocab_size_) == dtype_, sidecar_path, "vocab_size ", vocab_size_,
            " does not go with dtype ", dtype);
  fingerprint_ = field("tokenizer", &nlohmann::json::is_string, "a string").get<std::string>();

  const int fd = open_regular_file(path_, "a token file");
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const std::string reason = errno_text();
    ::close(fd);
    throw Error(path_, "cannot stat: " + reason);
  }
  const uint64_t want = checked_mul(tokens_, dtype_bytes(dtype_), sidecar_path, "tokens x bytes per token");
  if (static_cast<uint64_t>(st.st_size) != want) {
    ::close(fd);
    throw Error(path_, "holds " + std::to_string(st.st_size) + " bytes but its sidecar says " +
                           std::to_string(tokens_) + " " + dtype + " tokens (" + std::to_string(want) +
                           " bytes): truncated or overwritten");
  }
  if (want > 0) {
    map_ = ::mmap(nullptr, want, PROT_READ, MAP_SHARED, fd, 0);
    if (map_ == MAP_FAILED) {
      map_ = nullptr;
      const std::string reason = errno_text();
      ::close(fd);
      throw Error(path_, "cannot map: " + reason);
    }
    map_bytes_ = want;
    ::madvise(map_, map_bytes_, MADV_WILLNEED);
  }
  ::close(fd);  // the mapping stays valid

  // Checking every id now costs one pass; an id past the vocabulary would
  // otherwise index past the embedding table mid-training.
  const auto check = [&](const auto* ids) {
    for (uint64_t i = 0; i < tokens_; ++i) {
      if (static_cast<int64_t>(ids[i]) >= vocab_size_) {
        const uint64_t bad = ids[i];
        unmap();
        throw Error(path_, "token " + std::to_string(i) + " is " + std::to_string(bad) +
                               ", outside the vocabulary of " + std::to_string(vocab_size_) + " tokens");
      }
    }
  };
  if (dtype_ == TokenDType::u16) {
    check(static_cast<const uint16_t*>(map_));
  } else {
    check(static_cast<const uint32_t*>(map_));
  }
}

TokenFile::~TokenFile() { unmap(); }

TokenFile::TokenFile(TokenFile&& other) noexcept
    : path_(std::move(other.path_)),
      tokens_(other.tokens_),
      vocab_size_(other.vocab_size_),
      dtype_(other.dtype_),
      fingerprint_(std::move(other.fingerprint_)),
      map_(std::exchange(other.map_, nullptr)),
      map_bytes_(std::exchange(other.map_bytes_, 0)) {
  other.tokens_ = 0;
}

TokenFile& TokenFile::operator=(TokenFile&& other) noexcept {
  if (this != &other) {
    unmap();
    path_ = std::move(other.path_);
    tokens_ = std::exchange(other.tokens_, 0);
    vocab_size_ = other.vocab_size_;
    dtype_ = other.dtype_;
    fingerprint_ = std::move(other.fingerprint_);
    map_ = std::exchange(other.map_, nullptr);
    map_bytes_ = std::exchange(other.map_bytes_, 0);
  }
  return *this;
}

void TokenFile::unmap() noexcept {
  if (map_ != nullptr) ::munmap(map_, map_bytes_);
  map_ = nullptr;
  map_bytes_ = 0;
}

void TokenFile::require_tokenizer(const std::string& fingerprint) const {
  SPW_CHECK(fingerprint == fingerprint_, path_, "was made by tokenizer ", fingerprint_,
            " but the tokenizer in use is ", fingerprint, "; tokenize the corpus again");
}

uint32_t TokenFile::operator[](uint64_t i) const {
  SPW_CHECK(i < tokens_, path_, "token ", i, " is past the end (", tokens_, " tokens)");
  return dtype_ == TokenDType::u16 ? static_cast<const uint16_t*>(map_)[i]
                                   : static_cast<const uint32_t*>(map_)[i];
}

void TokenFile::copy(uint64_t begin, std::span<int32_t> out) const {
  SPW_CHECK(begin <= tokens_ && out.size() <= tokens_ - begin, path_, "tokens [", begin, ", ",
            begin + out.size(), ") run past the end (", tokens_, " tokens)");
  if (dtype_ == TokenDType::u16) {
    const uint16_t* ids = static_cast<const uint16_t*>(map_) + begin;
    for (size_t i = 0; i < out.size(); ++i) out[i] = ids[i];
  } else {
    const uint32_t* ids = static_cast<const uint32_t*>(map_) + begin;
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<int32_t>(ids[i]);
  }
}

}  // namespace spillway
