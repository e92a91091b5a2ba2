// The one line a failure is reported in, wherever it is reported (the
// command line's `spillway: <line>`, a Python exception): a spillway::Error
// names its own thing; std::bad_alloc says "out of memory" in plain words;
// anything else is named by what it says, or as unknown.
#pragma once

#include <exception>
#include <string>
#include <string_view>

namespace spillway {

// `text` on one line: line breaks become "; ", trailing ones go.
std::string one_line(std::string text);

// The line for the exception `e`, which escaped while `doing` ("train",
// "reading the command line").
std::string escaped_error_text(std::exception_ptr e, std::string_view doing);

}  // namespace spillway
