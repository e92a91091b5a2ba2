#include "base/error_text.h"

#include <new>
#include <stdexcept>

#include "base/status.h"

namespace spillway {

std::string one_line(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  std::string out;
  for (char c : text) {
    if (c == '\n') {
      out += "; ";
    } else if (c != '\r') {
      out += c;
    }
  }
  return out;
}

namespace {

// nlohmann's "[json.exception.type_error.302] type must be ..." without the
// bracket, which names the library and not the problem.
std::string without_library_prefix(std::string text) {
  if (text.starts_with("[json.exception.")) {
    if (size_t close = text.find("] "); close != std::string::npos) text.erase(0, close + 2);
  }
  return text;
}

}  // namespace

std::string escaped_error_text(std::exception_ptr e, std::string_view doing) {
  const std::string at = std::string(doing) + ": ";
  try {
    std::rethrow_exception(e);
  } catch (const Error& error) {
    return one_line(error.what());  // names its own file, flag or variable
  } catch (const std::bad_alloc&) {
    return at + "out of memory: this machine could not allocate what it needs (are the sizes in the model's "
                "config, the data and the flags what you meant?)";
  } catch (const std::length_error&) {
    // std::vector's "cannot create std::vector larger than max_size()": a
    // size that no allocation could hold, typically from a huge count.
    return at + "out of memory: asked for more elements than any allocation can hold (a huge size in the config, "
                "data or flags?)";
  } catch (const std::exception& error) {
    return at + one_line(without_library_prefix(error.what()));
  } catch (...) {
    return at + "failed with an error of unknown kind";
  }
}

}  // namespace spillway
