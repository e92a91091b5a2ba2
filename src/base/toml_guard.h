// Checks of TOML text made before toml++ parses it, for the two kinds of
// input toml++ 3.3 (Debian's) does not report but asserts on, which a
// release build turns into undefined behaviour: a raw control character
// (TOML allows none but tab and line ends), a table header whose `[` or
// `[[` is followed by something that cannot start a key (`[=`, `[` at the
// end of a line), '}' where an array expects a value (`[1, }`), and a
// non-ASCII character outside strings and comments (bare keys and every
// other value are ASCII). All are invalid TOML. One more refusal does touch
// valid TOML: toml++ 3.3 tests characters for whitespace, strings included,
// with a table that sends U+00A1-U+0499 and U+FC06-U+FFFF (but U+FEFF) into
// unreachable code, so those characters are refused anywhere in a TOML file,
// with a line saying to write the file as JSON (which takes any text).
#pragma once

#include <string>

namespace spillway {

// Error("path:line:column", problem) at the first such place.
void check_toml_text(const std::string& path, const std::string& text);

}  // namespace spillway
