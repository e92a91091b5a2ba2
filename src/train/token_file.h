// Token files, nanoGPT style: a flat little-endian array of token ids,
// uint16 when the vocabulary fits (≤ 65,536 tokens) and uint32 otherwise,
// with a sidecar `<path>.json` recording dtype, token count, vocabulary size
// and the tokenizer's fingerprint, so that a truncated file or data made by
// another tokenizer is caught when the file is opened, not as garbage loss.
//
// Writing is atomic per file (base/atomic_file.h), data first and sidecar
// last; a failed or abandoned write leaves nothing behind. Reading maps the
// file and checks every id.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/atomic_file.h"

namespace spillway {

enum class TokenDType { u16, u32 };

TokenDType token_dtype_for(int64_t vocab_size);
std::string token_sidecar_path(const std::string& path);  // path + ".json"

class TokenFileWriter {
 public:
  // Creates the data temporary now; Error naming `path` if the folder is not
  // writable. Destroying the writer before commit() removes the temporaries.
  TokenFileWriter(std::string path, int64_t vocab_size, std::string tokenizer_fingerprint);

  // An id outside [0, vocab_size) throws Error and abandons the write.
  void append(std::span<const int32_t> ids);
  // Flushes, then puts the data and its sidecar in place; any failure
  // abandons the write.
  void commit();
  uint64_t tokens_written() const { return tokens_; }

 private:
  void flush();

  std::string path_;
  int64_t vocab_size_;
  std::string fingerprint_;
  TokenDType dtype_;
  AtomicFile data_;
  std::vector<uint8_t> buffer_;
  uint64_t tokens_ = 0;
};

// Writes a whole token file at once.
void write_token_file(const std::string& path, std::span<const int32_t> ids, int64_t vocab_size,
                      const std::string& tokenizer_fingerprint);

class TokenFile {
 public:
  // Reads the sidecar, maps the data and checks its size and every id;
  // Error naming the file and the problem otherwise.
  explicit TokenFile(std::string path);
  ~TokenFile();
  TokenFile(TokenFile&& other) noexcept;
  TokenFile& operator=(TokenFile&& other) noexcept;
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;

  const std::string& path() const { return path_; }
  uint64_t size() const { return tokens_; }
  int64_t vocab_size() const { return vocab_size_; }
  TokenDType dtype() const { return dtype_; }
  const std::string& tokenizer_fingerprint() const { return fingerprint_; }

  // Error when the file was made by a tokenizer with another fingerprint.
  void require_tokenizer(const std::string& fingerprint) const;

  uint32_t operator[](uint64_t i) const;
  // Copies tokens [begin, begin + out.size()) as int32; Error if out of range.
  void copy(uint64_t begin, std::span<int32_t> out) const;

 private:
  void unmap() noexcept;

  std::string path_;
  uint64_t tokens_ = 0;
  int64_t vocab_size_ = 0;
  TokenDType dtype_ = TokenDType::u16;
  std::string fingerprint_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
};

}  // namespace spillway
