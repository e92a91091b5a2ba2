// `spillway serve --device cuda`: the server runs the batched GPU decoder,
// says so on /metrics, and answers a greedy request with the same text alone
// and among seven other requests running at once (batch invariance, end to
// end). Plain HTTP over a socket, so it needs no Python on the GPU machine.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "device/cuda/cuda_device.h"
#include "e2e/e2e_util.h"
#include "e2e/processes.h"

namespace spillway::e2e {
namespace {

// One HTTP/1.1 request with Connection: close; the response's body, or the
// empty string when the connection fails.
std::string http(int port, const std::string& method, const std::string& path, const std::string& body = "") {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    if (fd >= 0) ::close(fd);
    return "";
  }
  const std::string request = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n" +
                              "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
                              "\r\n\r\n" + body;
  for (size_t sent = 0; sent < request.size();) {
    const ssize_t n = ::send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  std::string response;
  char buffer[4096];
  for (ssize_t n; (n = ::recv(fd, buffer, sizeof buffer, 0)) > 0;) response.append(buffer, static_cast<size_t>(n));
  ::close(fd);
  const size_t head_end = response.find("\r\n\r\n");
  return head_end == std::string::npos ? "" : response.substr(head_end + 4);
}

// The text of a greedy completion of `prompt`.
std::string complete(int port, const std::string& prompt) {
  const nlohmann::json body = {{"prompt", prompt}, {"max_tokens", 24}, {"temperature", 0}};
  const std::string answer = http(port, "POST", "/v1/completions", body.dump());
  const auto j = nlohmann::json::parse(answer, nullptr, false);
  if (j.is_discarded() || !j.contains("choices")) return "no completion: " + answer;
  return j["choices"][0]["text"].get<std::string>();
}

TEST(ServeCuda, AnswersAloneAndInABatchAlike) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  ScratchDir dir("serve_cuda");
  write_file(dir / "corpus.txt", make_corpus(200, 5));
  write_file(dir / "micro.json", micro_config_json());
  const CommandResult trained = run_spillway("train --config " + (dir / "micro.json") + " --data " +
                                             (dir / "corpus.txt") +
                                             " --separator % --vocab 300 --steps 4 --batch 2 --seq 16 "
                                             "--eval-batches 1 --sample-tokens 0 --quiet -o " + (dir / "run"));
  ASSERT_EQ(trained.exit_code, 0) << trained.out;

  const std::string log = dir / "serve.log";
  const pid_t server =
      start_spillway(words_of("serve -m " + (dir / "run") + " --port 0 --parallel 8 --device cuda"), {}, log);
  int port = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(90);
  std::smatch m;
  while (port == 0 && std::chrono::steady_clock::now() < deadline) {
    const std::string text = read_file(log);
    if (std::regex_search(text, m, std::regex("http://127\\.0\\.0\\.1:([0-9]+)"))) port = std::stoi(m[1]);
    else std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_GT(port, 0) << read_file(log);
  EXPECT_NE(read_file(log).find("(cuda:0 "), std::string::npos) << read_file(log);

  const std::string alone = complete(port, "the cat sees");
  EXPECT_EQ(alone.rfind("no completion", 0), std::string::npos) << alone;
  const std::vector<std::string> others = {"a dog", "my friend likes", "the old man", "every child finds the",
                                           "the river", "a quiet town paints", "her brother"};
  std::vector<std::string> answers(others.size() + 1);
  std::vector<std::thread> clients;
  for (size_t i = 0; i < others.size(); ++i) clients.emplace_back([&, i] { answers[i] = complete(port, others[i]); });
  clients.emplace_back([&] { answers.back() = complete(port, "the cat sees"); });
  for (std::thread& t : clients) t.join();
  EXPECT_EQ(answers.back(), alone) << "the same greedy request among seven others";
  for (size_t i = 0; i < others.size(); ++i) {
    EXPECT_EQ(answers[i], complete(port, others[i])) << "'" << others[i] << "' in the batch and alone";
  }

  const std::string metrics = http(port, "GET", "/metrics");
  EXPECT_NE(metrics.find("spillway_decoder_info{decoder=\"cuda:0 "), std::string::npos) << metrics;
  ::kill(server, SIGTERM);
  EXPECT_EQ(wait_for(server, std::chrono::seconds(30)), 0) << read_file(log);
}

}  // namespace
}  // namespace spillway::e2e
