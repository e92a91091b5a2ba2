// Errors carry the name of the thing that is wrong and what is wrong with it,
// so that a user sees one line that says both ("tokens.bin: truncated ...").
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace spillway {

class Error : public std::runtime_error {
 public:
  Error(std::string_view thing, std::string_view problem)
      : std::runtime_error(std::string(thing) + ": " + std::string(problem)),
        thing_(thing),
        problem_(problem) {}
  const std::string& thing() const { return thing_; }
  const std::string& problem() const { return problem_; }

 private:
  std::string thing_;
  std::string problem_;
};

namespace detail {
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}
}  // namespace detail

// SPW_CHECK(cond, thing, message parts...) throws Error(thing, message) when
// cond is false. Message parts are streamed, so numbers and shapes need no
// formatting at the call site.
#define SPW_CHECK(cond, thing, ...)                                      \
  do {                                                                   \
    if (!(cond)) {                                                       \
      throw ::spillway::Error((thing), ::spillway::detail::concat(__VA_ARGS__)); \
    }                                                                    \
  } while (0)

}  // namespace spillway
