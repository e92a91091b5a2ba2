#include "base/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

#include "base/status.h"

namespace spillway {

namespace {

// The system's words for errno, and for the limits a write runs into, what
// they mean in plain words (the user can act on those).
std::string errno_text() {
  const int err = errno;
  std::string text = std::strerror(err);
  if (err == ENOSPC) text += " (the disk is full)";
  if (err == EDQUOT) text += " (the disk quota is used up)";
  if (err == EFBIG) text += " (the file size limit was hit: see `ulimit -f`)";
  return text;
}

std::string folder_of(const std::string& path) {
  const std::filesystem::path folder = std::filesystem::path(path).parent_path();
  return folder.empty() ? std::string(".") : folder.string();
}

// Empty on success, else what went wrong; callers name the thing.
std::string sync_folder(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return "cannot open the folder to sync it: " + errno_text();
  const int rc = ::fsync(fd);
  const std::string reason = rc == 0 ? std::string() : errno_text();
  ::close(fd);
  return rc == 0 ? std::string() : "cannot sync the folder: " + reason;
}

}  // namespace

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  const std::string pattern = path_ + ".tmp.XXXXXX";
  std::string temp = pattern;
  fd_ = ::mkostemp(temp.data(), O_CLOEXEC);
  SPW_CHECK(fd_ >= 0, path_, "cannot create the temporary file ", pattern, " beside it: ", errno_text());
  temp_path_ = std::move(temp);
}

AtomicFile::~AtomicFile() { abandon(); }

AtomicFile::AtomicFile(AtomicFile&& other) noexcept
    : path_(std::move(other.path_)),
      temp_path_(std::move(other.temp_path_)),
      fd_(std::exchange(other.fd_, -1)) {
  other.temp_path_.clear();
}

AtomicFile& AtomicFile::operator=(AtomicFile&& other) noexcept {
  if (this != &other) {
    abandon();
    path_ = std::move(other.path_);
    temp_path_ = std::move(other.temp_path_);
    other.temp_path_.clear();
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

void AtomicFile::abandon() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!temp_path_.empty()) ::unlink(temp_path_.c_str());
  temp_path_.clear();
}

void AtomicFile::fail(const std::string& problem) {
  abandon();
  throw Error(path_, problem);
}

void AtomicFile::write(const void* bytes, size_t count) {
  SPW_CHECK(is_open(), path_, "written after the write was committed or abandoned");
  const char* p = static_cast<const char*>(bytes);
  while (count > 0) {
    // Linux moves at most ~2 GiB per call; smaller pieces keep that explicit.
    const ssize_t done = ::write(fd_, p, std::min<size_t>(count, size_t{1} << 30));
    if (done < 0 && errno == EINTR) continue;
    if (done <= 0) fail("cannot write: " + (done < 0 ? errno_text() : std::string("no progress")));
    p += done;
    count -= static_cast<size_t>(done);
  }
}

void AtomicFile::commit() {
  SPW_CHECK(is_open(), path_, "committed after the write was committed or abandoned");
  // mkstemp makes the file 0600; changing the mode before the fsync makes the
  // new mode as durable as the data.
  if (::fchmod(fd_, 0644) != 0) {
    fail("cannot set the mode of the temporary file " + temp_path_ + ": " + errno_text());
  }
  if (::fsync(fd_) != 0) fail("cannot sync the temporary file " + temp_path_ + ": " + errno_text());
  const int closed = ::close(fd_);
  fd_ = -1;
  if (closed != 0) fail("cannot close the temporary file " + temp_path_ + ": " + errno_text());
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    fail("cannot rename the temporary file " + temp_path_ + " into place: " + errno_text());
  }
  temp_path_.clear();
  const std::string folder = folder_of(path_);
  const std::string problem = sync_folder(folder);
  SPW_CHECK(problem.empty(), path_, "written and renamed into place, but its folder ", folder,
            " was not synced, so the rename may not survive a power cut: ", problem);
}

void write_file_atomically(const std::string& path, const std::function<void(FileSink&)>& fill) {
  AtomicFile file(path);
  FileSink sink(file);
  fill(sink);
  file.commit();
}

void write_text_file_atomically(const std::string& path, const std::string& text) {
  AtomicFile file(path);
  file.write(text.data(), text.size());
  file.commit();
}

void fsync_directory(const std::string& dir) {
  const std::string problem = sync_folder(dir);
  SPW_CHECK(problem.empty(), dir, problem);
}

}  // namespace spillway
