#include "base/json_text.h"

#include <gtest/gtest.h>

#include <string>

#include "base/status.h"

namespace spillway {
namespace {

// The one-line error of reading `text` as JSON named f.json.
std::string error_of(std::string_view text, std::string_view what = "not valid JSON") {
  try {
    json_from_text(text, "f.json", what);
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("not a spillway::Error: ") + e.what();
  }
  return "no error";
}

TEST(JsonText, ValidTextParses) {
  EXPECT_EQ(json_from_text("{\"a\": [1, 2]}", "f.json"), nlohmann::json::parse("{\"a\": [1, 2]}"));
}

TEST(JsonText, SyntaxErrorsNameLineColumnAndProblemWithoutLibraryText) {
  EXPECT_EQ(error_of("{\"a\": 1,}"),
            "f.json: not valid JSON at line 1, column 9: unexpected '}'; expected string literal (reading object key)");
  EXPECT_EQ(error_of("{\"a\":\n tru}"),
            "f.json: not valid JSON at line 2, column 5: invalid literal; last read: '\"a\":<U+000A> tru}' "
            "(reading value)");
  EXPECT_EQ(error_of("{\"a\": 1"),
            "f.json: not valid JSON at line 1, column 8: unexpected end of input; expected '}' (reading object)");
  EXPECT_EQ(error_of("[1, 2]\n]"),
            "f.json: not valid JSON at line 2, column 1: unexpected ']'; expected end of input (reading value)");
  EXPECT_EQ(error_of("{\"a\": 1,}", "header is not valid JSON"),
            "f.json: header is not valid JSON at line 1, column 9: unexpected '}'; expected string literal "
            "(reading object key)");
}

TEST(JsonText, EmptyTextSaysSo) {
  EXPECT_EQ(error_of(""), "f.json: not valid JSON: there is nothing in it");
  EXPECT_EQ(error_of(" \n\t"), "f.json: not valid JSON: there is nothing in it");
}

TEST(JsonText, BadBytesAreWrittenAsHexOnOneLine) {
  EXPECT_EQ(error_of("{\"\xff\xfe\": {}}"),
            "f.json: not valid JSON at line 1, column 3: invalid string: ill-formed UTF-8 byte; last read: '\"\\xff'; "
            "expected string literal (reading object key)");
}

TEST(JsonText, NumberTooLargeForADoubleIsAParseErrorWithItsPosition) {
  EXPECT_EQ(error_of("{\n  \"rope_theta\": 1e999}"),
            "f.json: not valid JSON at line 2, column 17: the number 1e999 is too large");
}

}  // namespace
}  // namespace spillway
