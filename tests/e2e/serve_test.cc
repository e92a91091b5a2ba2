// `spillway serve` on a tiny model trained here, checked by OpenAI's Python
// client (tests/e2e/openai_client_check.py): chat and completions, whole and
// streamed, usage, stop strings, n, 8 concurrent clients against each alone,
// and the documented answer to malformed JSON, unknown fields, prompts and
// max_tokens past the context, a missing API key and a dropped connection.
// Then `generate --chat` and `chat` on the same model, and both `chat` and
// `serve` running a LoRA run's checkpoint and a base model with --adapter.
#include <gtest/gtest.h>

#include <chrono>
#include <regex>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "e2e/e2e_util.h"
#include "e2e/processes.h"
#include "infer/decoder.h"
#include "testing/real_models.h"
#include "train/checkpoint.h"

namespace spillway::e2e {
namespace {

constexpr int kContext = 256;

class Serve : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new ScratchDir("serve");
    write_file(*dir_ / "corpus.txt", make_corpus(200, 5));
    write_file(*dir_ / "micro.json", micro_config_json());
    const CommandResult r =
        run_spillway("train --config " + (*dir_ / "micro.json") + " --data " + (*dir_ / "corpus.txt") +
                     " --separator % --vocab 300 --steps 4 --batch 2 --seq 16 --eval-batches 1 "
                     "--sample-tokens 0 --quiet -o " +
                     (*dir_ / "run"));
    ASSERT_EQ(r.exit_code, 0) << r.out;
  }
  static void TearDownTestSuite() { delete dir_; }
  static ScratchDir* dir_;
};
ScratchDir* Serve::dir_ = nullptr;

// The port a server announced in its log, or 0 when it has not (yet).
int announced_port(const std::string& log) {
  std::smatch m;
  const std::string text = read_file(log);
  return std::regex_search(text, m, std::regex("http://127\\.0\\.0\\.1:([0-9]+)")) ? std::stoi(m[1]) : 0;
}

TEST_F(Serve, AnswersTheOpenAiClient) {
  const std::string python = testing::venv_python_with("openai");
  if (python.empty()) {
    if (testing::under_ci()) FAIL() << "the openai package is missing from .venv: scripts/setup.sh installs it";
    GTEST_SKIP() << "the openai package is not in .venv (scripts/setup.sh installs it)";
  }
  const std::string log = *dir_ / "serve.log";
  const pid_t server = start_spillway(
      words_of("serve -m " + (*dir_ / "run") + " --port 0 --parallel 16 --api-key sk-test --device cpu"), {}, log);
  int port = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while ((port = announced_port(log)) == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_GT(port, 0) << read_file(log);
  const CommandResult r =
      run_command(python + " " + (testing::repo_root() / "tests/e2e/openai_client_check.py").string() +
                  " http://127.0.0.1:" + std::to_string(port) + " sk-test " + std::to_string(kContext));
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("14 passed, 0 failed"), std::string::npos) << r.out;
  ::kill(server, SIGTERM);
  EXPECT_EQ(wait_for(server, std::chrono::seconds(30)), 0) << read_file(log);
  EXPECT_NE(read_file(log).find("spillway serve: stopped"), std::string::npos) << read_file(log);
}

TEST_F(Serve, RefusesAMissingDeviceAndACacheWithoutRoom) {
  // Where a GPU is visible, --device cuda serves (serve_cuda_test.cc).
  if (!infer::device_is_cuda("auto")) {
    const CommandResult cuda = run_spillway("serve -m " + (*dir_ / "run") + " --device cuda --port 0");
    EXPECT_EQ(cuda.exit_code, 1);
    EXPECT_NE(cuda.out.find("--device"), std::string::npos) << cuda.out;
  }
  const CommandResult tiny = run_spillway("serve -m " + (*dir_ / "run") + " --kv-cache-mem 100 --port 0");
  EXPECT_EQ(tiny.exit_code, 1);
  EXPECT_NE(tiny.out.find("--kv-cache-mem: 100 B holds no block"), std::string::npos) << tiny.out;
}

TEST_F(Serve, GenerateChatAndChatAnswerInTheChatFormat) {
  // The tiny model's template is spillway's plain one: greedy replies from
  // `chat` and `generate --chat` to the same message are the same text.
  const CommandResult once =
      run_spillway("generate -m " + (*dir_ / "run") + " --chat -p 'the cat sees' -n 12 --temperature 0 --device cpu");
  ASSERT_EQ(once.exit_code, 0) << once.out;
  const CommandResult talk = run_command("printf 'the cat sees\\na dog\\n' | " + std::string(SPILLWAY_BIN) +
                                         " chat -m " + (*dir_ / "run") + " -n 12 --temperature 0 --device cpu");
  ASSERT_EQ(talk.exit_code, 0) << talk.out;
  EXPECT_EQ(talk.out.rfind(once.out, 0), 0u) << "chat:\n" << talk.out << "\ngenerate --chat:\n" << once.out;
  EXPECT_GT(talk.out.size(), once.out.size()) << "no second reply: " << talk.out;
}

// A LoRA run's checkpoint chats and serves as the tuned model; so does its
// base with --adapter; the base alone answers otherwise.
TEST_F(Serve, ChatAndServeTakeALoraAdapter) {
  const std::string base = *dir_ / "run", tuned = *dir_ / "lora";
  const CommandResult ft = run_spillway("finetune -m " + base + " --data " + (*dir_ / "corpus.txt") +
                                        " --separator % --steps 12 --batch 4 --seq 16 --lr 0.02 --min-lr 0.02 "
                                        "--warmup 0 --lora-rank 4 --lora-targets q,v,down --sample-tokens 0 "
                                        "--device cpu --quiet -o " + tuned);
  ASSERT_EQ(ft.exit_code, 0) << ft.out;
  const std::string adapter = train::resolve_checkpoint(tuned);  // the run's last checkpoint: a PEFT folder
  auto chat = [&](const std::string& model) {
    const CommandResult c = run_command("printf 'the cat sees\\n' | " + std::string(SPILLWAY_BIN) + " chat -m " +
                                        model + " -n 12 --temperature 0 --device cpu");
    EXPECT_EQ(c.exit_code, 0) << c.out;
    return c.out;
  };
  const std::string reply = chat(tuned);
  EXPECT_EQ(reply, chat(base + " --adapter " + adapter));
  EXPECT_NE(reply, chat(base));

  // One greedy completion from a server of `model`.
  auto served = [&](const std::string& model, const std::string& name) -> std::string {
    const std::string log = *dir_ / (name + ".log");
    const pid_t server =
        start_spillway(words_of("serve -m " + model + " --model-name m --port 0 --device cpu"), {}, log);
    int port = 0;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while ((port = announced_port(log)) == 0 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    EXPECT_GT(port, 0) << read_file(log);
    const CommandResult r = run_command(
        "curl -s http://127.0.0.1:" + std::to_string(port) +
        "/v1/completions -H 'Content-Type: application/json' "
        "-d '{\"model\": \"m\", \"prompt\": \"the cat sees\", \"max_tokens\": 12, \"temperature\": 0}'");
    ::kill(server, SIGTERM);
    EXPECT_EQ(wait_for(server, std::chrono::seconds(30)), 0) << read_file(log);
    EXPECT_EQ(r.exit_code, 0) << r.out;
    const nlohmann::json answer = nlohmann::json::parse(r.out, nullptr, false);
    EXPECT_TRUE(answer.contains("choices")) << r.out;
    return answer.contains("choices") ? answer["choices"][0]["text"].get<std::string>() : "";
  };
  const std::string completion = served(tuned, "serve_tuned");
  EXPECT_FALSE(completion.empty());
  EXPECT_EQ(completion, served(base + " --adapter " + adapter, "serve_adapter"));
  EXPECT_NE(completion, served(base, "serve_base"));
}

}  // namespace
}  // namespace spillway::e2e
