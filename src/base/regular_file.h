// Opening a file that must be a regular file (a model, a token file, a
// config): a FIFO, a directory or a device is refused by its kind before it
// is opened, so that reading a FIFO nobody writes to cannot hang spillway.
#pragma once

#include <string>
#include <string_view>

namespace spillway {

// "a directory", "a FIFO", ... for a file that is not regular; empty for a
// regular file (or one that cannot be stat-ed).
std::string non_regular_kind(const std::string& path);

// A read-only descriptor of `path` (the caller closes it), after checking
// that it is a regular file. Error(path, "is a FIFO, not <kind>"),
// or Error(path, "cannot open: <reason>").
// `kind` says what the file should have been ("a safetensors file").
int open_regular_file(const std::string& path, std::string_view kind);

// The whole of `path` as text, with the same checks.
std::string read_regular_file(const std::string& path, std::string_view kind);

}  // namespace spillway
