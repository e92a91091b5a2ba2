// Checks of TOML text made before toml++ parses it, for the two kinds of
// input toml++ 3.3 (Debian's) does not report but asserts on, which a
// release build turns into undefined behaviour: a raw control character
// (TOML allows none but tab and line ends), a table header whose `[` or
// `[[` is followed by something that cannot start a key (`[=`, `[` at the
// end of a line), '}' where an array expects a value (`[1, }`), and a
// non-ASCII character outside strings and comments (bare keys and every
// other value are ASCII). All are invalid TOML, so no valid file is refused.
#pragma once

#include <string>

namespace spillway {

// Error("path:line:column", problem) at the first such place.
void check_toml_text(const std::string& path, const std::string& text);

}  // namespace spillway
