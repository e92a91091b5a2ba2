#include "base/regular_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/status.h"

namespace spillway {

namespace {

std::string kind_of_mode(mode_t mode) {
  if (S_ISREG(mode)) return {};
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "a special file";
}

[[noreturn]] void refuse(const std::string& path, const std::string& found, std::string_view kind) {
  throw Error(path, "is " + found + ", not " + std::string(kind));
}

}  // namespace

std::string non_regular_kind(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return {};
  return kind_of_mode(st.st_mode);
}

int open_regular_file(const std::string& path, std::string_view kind) {
  // stat first: opening a FIFO for reading blocks until a writer comes.
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    throw Error(path, std::string("cannot open: ") + std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) refuse(path, kind_of_mode(st.st_mode), kind);
  // O_NONBLOCK too, in case the path was replaced by a FIFO since the stat;
  // it changes nothing for a regular file.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw Error(path, std::string("cannot open: ") + std::strerror(errno));
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const std::string found = kind_of_mode(st.st_mode);
    ::close(fd);
    refuse(path, found.empty() ? "a special file" : found, kind);
  }
  return fd;
}

std::string read_regular_file(const std::string& path, std::string_view kind) {
  const int fd = open_regular_file(path, kind);
  std::string text;
  char buffer[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const std::string reason = std::strerror(errno);
      ::close(fd);
      throw Error(path, "read failed: " + reason);
    }
    if (n == 0) break;
    text.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return text;
}

}  // namespace spillway
