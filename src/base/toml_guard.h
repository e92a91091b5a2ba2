// Checks of TOML text made before toml++ parses it, for the two kinds of
// input toml++ 3.3 (Debian's) does not report but asserts on, which a
// release build turns into undefined behaviour: a raw control character
// (TOML allows none but tab and line ends), a table header whose `[` or
// `[[` is followed by something that cannot start a key (`[=`, `[` at the
// end of a line), '}' where an array expects a value (`[1, }`), and a
// non-ASCII character outside strings and comments (bare keys and every
// other value are ASCII). All are invalid TOML. One more refusal does touch
// valid TOML: toml++ 3.3 tests characters for whitespace with a table that
// sends U+00A1-U+0499, U+2C5E-U+3057 (but U+3000) and U+FB26-U+FEFE into
// unreachable code. Outside strings such characters are refused as above;
// inside strings it tests only in a multi-line basic string, the character
// after a backslash and, after a line-ending backslash, the first one that
// is not whitespace. There alone they are refused, with a line saying to
// write the file as JSON (which takes any text).
#pragma once

#include <string>

namespace spillway {

// Error("path:line:column", problem) at the first such place.
void check_toml_text(const std::string& path, const std::string& text);

}  // namespace spillway
