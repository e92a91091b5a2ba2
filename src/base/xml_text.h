// Text placed inside SVG (XML) elements and attributes.
#pragma once

#include <string>
#include <string_view>

namespace spillway {

// `s` with <, > and & written as entities.
std::string xml_escaped(std::string_view s);

}  // namespace spillway
