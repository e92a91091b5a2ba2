// Request bodies of the OpenAI API: what is read, and the 400 error (with the
// parameter at fault) for what cannot be honoured.
#include "infer/openai_request.h"

#include <gtest/gtest.h>

#include <string>

namespace spillway::infer {
namespace {

void expect_error(const std::string& body, bool chat, const std::string& param, const std::string& words) {
  try {
    parse_api_request(body, chat);
    ADD_FAILURE() << "accepted " << body;
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400) << body;
    EXPECT_EQ(e.param, param) << body;
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    EXPECT_EQ(error_body(e)["error"]["type"], "invalid_request_error");
  }
}

TEST(OpenAiRequest, ReadsAChatRequest) {
  const ApiRequest r = parse_api_request(
      R"({"model": "m", "messages": [{"role": "system", "content": "Be brief."},
          {"role": "user", "content": [{"type": "text", "text": "Hi "}, {"type": "text", "text": "there"}]}],
          "max_tokens": 20, "temperature": 0, "top_p": 0.5, "top_k": 4, "seed": 7, "stop": ["\n", "END"], "n": 2,
          "stream": true, "stream_options": {"include_usage": true}, "frequency_penalty": 0, "user": "u1"})",
      true);
  EXPECT_TRUE(r.chat);
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[1].content, "Hi there");
  EXPECT_EQ(*r.max_tokens, 20);
  EXPECT_EQ(r.temperature, 0);
  EXPECT_EQ(r.top_p, 0.5);
  EXPECT_EQ(r.top_k, 4);
  EXPECT_EQ(*r.seed, 7u);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"\n", "END"}));
  EXPECT_EQ(r.n, 2);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
}

TEST(OpenAiRequest, ReadsCompletionPromptsAsTextOrIds) {
  ApiRequest r = parse_api_request(R"({"model": "m", "prompt": "Once"})", false);
  EXPECT_EQ(r.text_prompts, std::vector<std::string>{"Once"});
  EXPECT_FALSE(r.max_tokens.has_value());
  EXPECT_EQ(r.temperature, 1.0);
  r = parse_api_request(R"({"prompt": [1, 2, 3], "stop": "x", "top_k": -1})", false);
  EXPECT_EQ(r.id_prompts, (std::vector<std::vector<int32_t>>{{1, 2, 3}}));
  EXPECT_EQ(r.stop, std::vector<std::string>{"x"});
  EXPECT_EQ(r.top_k, 0);
  r = parse_api_request(R"({"prompt": ["a", "b"]})", false);
  EXPECT_EQ(r.text_prompts.size(), 2u);
}

TEST(OpenAiRequest, RefusesWhatItCannotHonour) {
  expect_error("{\"messages\": [", true, "", "not valid JSON");
  expect_error("[1, 2]", true, "", "must be a JSON object");
  expect_error(R"({"messages": [{"role": "user", "content": "hi"}], "frobnicate": 1})", true, "frobnicate",
               "unrecognized request argument");
  expect_error(R"({"messages": []})", true, "messages", "non-empty array");
  expect_error(R"({"model": "m"})", true, "messages", "is required");
  expect_error(R"({"model": "m"})", false, "prompt", "is required");
  expect_error(R"({"prompt": "x", "messages": []})", false, "messages", "unrecognized");
  expect_error(R"({"messages": [{"role": "robot", "content": "hi"}]})", true, "messages[0].role", "'robot'");
  expect_error(R"({"messages": [{"role": "user"}]})", true, "messages[0].content", "missing");
  expect_error(R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", true,
               "messages[0].content", "only text parts");
  expect_error(R"({"prompt": "x", "max_tokens": 0})", false, "max_tokens", "between 1 and");
  expect_error(R"({"prompt": "x", "max_tokens": "ten"})", false, "max_tokens", "must be an integer");
  expect_error(R"({"prompt": "x", "temperature": 2.5})", false, "temperature", "between 0 and 2");
  expect_error(R"({"prompt": "x", "top_p": 0})", false, "top_p", "above 0");
  expect_error(R"({"prompt": "x", "n": 17})", false, "n", "between 1 and 16");
  expect_error(R"({"prompt": "x", "stop": ["a", "b", "c", "d", "e"]})", false, "stop", "more than 4");
  expect_error(R"({"prompt": "x", "stop": 3})", false, "stop", "string or an array");
  expect_error(R"({"prompt": "x", "presence_penalty": 0.5})", false, "presence_penalty", "not supported");
  expect_error(R"({"prompt": "x", "logprobs": 3})", false, "logprobs", "not supported");
  expect_error(R"({"prompt": "x", "stream_options": {"include_usage": true}})", false, "stream_options",
               "only allowed when 'stream' is true");
  expect_error(R"({"prompt": [1, -2]})", false, "prompt", "between 0 and");
  expect_error(R"({"prompt": {"text": "x"}})", false, "prompt", "must be a string");
}

// What the request fuzzer found: a number too large for a double is the
// JSON library's out_of_range, not its parse_error, and escaped to the
// server's handler of unexpected exceptions (a 500 naming the library).
TEST(OpenAiRequest, ANumberTooLargeForADoubleIsTheClientsError) {
  for (const bool chat : {false, true}) {
    try {
      parse_api_request(R"({"prompt": "x", "max_tokens": 1e999})", chat);
      ADD_FAILURE() << "1e999 was accepted";
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status, 400);
      EXPECT_EQ(std::string(e.what()), "the body is not valid JSON at line 1, column 31: the number 1e999 is too large");
    }
  }
}

}  // namespace
}  // namespace spillway::infer
