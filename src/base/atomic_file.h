// Files that are replaced whole or not at all: the new content goes into a
// unique temporary beside the destination (`<path>.tmp.XXXXXX`, so the final
// rename stays within one file system), which is fsynced, made 0644, renamed
// over the destination, and the folder fsynced so the rename itself survives
// a power cut. Until then readers see the old file (or none); a write that
// fails or is abandoned removes its temporary and leaves the old file as it
// was. Every checkpoint, weight, tokenizer and token file is written this way.
#pragma once

#include <cstddef>
#include <functional>
#include <string>

namespace spillway {

// One streaming atomic write. Failures are Error(path, problem) naming the
// destination; after one the temporary is already removed and the file
// takes no more writes, so partial content can never be committed.
class AtomicFile {
 public:
  // Creates the temporary now; Error if the folder is missing or not writable.
  explicit AtomicFile(std::string path);
  // Removes the temporary unless commit() succeeded.
  ~AtomicFile();
  AtomicFile(AtomicFile&& other) noexcept;
  AtomicFile& operator=(AtomicFile&& other) noexcept;
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  const std::string& path() const { return path_; }
  // True until commit() succeeds or the write is abandoned.
  bool is_open() const { return fd_ >= 0; }

  // Appends all `count` bytes.
  void write(const void* bytes, size_t count);
  // Puts the content in place durably. If only the final folder sync fails
  // the new file is already in place; the Error says so.
  void commit();
  // Removes the temporary now, as the destructor would.
  void abandon() noexcept;

 private:
  [[noreturn]] void fail(const std::string& problem);

  std::string path_;
  std::string temp_path_;  // empty once there is no temporary to remove
  int fd_ = -1;
};

// What write_file_atomically's callback writes through: it can append, but
// the ending (commit or abandon) stays with write_file_atomically.
class FileSink {
 public:
  explicit FileSink(AtomicFile& file) : file_(file) {}
  void write(const void* bytes, size_t count) { file_.write(bytes, count); }

 private:
  AtomicFile& file_;
};

// Writes `path` from `fill` and commits. If anything fails (fill throwing
// included) the temporary is removed, `path` keeps its old content and the
// exception propagates.
void write_file_atomically(const std::string& path, const std::function<void(FileSink&)>& fill);

void write_text_file_atomically(const std::string& path, const std::string& text);

// Makes changes to the entries of folder `dir` (renames, new files) durable;
// Error(dir, problem) otherwise.
void fsync_directory(const std::string& dir);

}  // namespace spillway
