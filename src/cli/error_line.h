// The one line `spillway` prints for a failure, and its exit code: whatever
// went wrong, a user sees `spillway: <thing>: <problem>` and the command
// exits 1; never a library's text, CLI11's second line, or `terminate`.
#pragma once

#include <CLI/CLI.hpp>
#include <exception>
#include <string>
#include <string_view>

#include "base/error_text.h"  // escaped_error_text: the line for any exception

namespace spillway::cli {

// The line for a CLI11 parse error: its message on one line, the flag
// first where CLI11 put it elsewhere, without "Run with --help ...".
std::string command_line_error_text(const CLI::Error& e);

// The line for a command line that names no subcommand: the word given
// where one was expected, or none, and the commands there are.
std::string command_missing_text(const CLI::App& app, int argc, char** argv);

// Prints "spillway: <text>" on stderr after flushing stdout, so that the
// error comes after whatever the command printed.
void print_error_line(const std::string& text);

// Makes std::terminate (an exception escaping a thread or a noexcept
// function) print the same one line and exit 1 instead of aborting;
// `doing` is read when it happens, so main can point it at what it does.
void install_last_resort_handler(const std::string* doing);

}  // namespace spillway::cli
