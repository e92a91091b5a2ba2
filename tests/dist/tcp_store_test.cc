#include "dist/tcp_store.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "base/status.h"

namespace spillway::dist {
namespace {

std::vector<char> bytes(const std::string& s) { return {s.begin(), s.end()}; }
std::string text(const std::vector<char>& v) { return {v.begin(), v.end()}; }

TEST(TcpStore, ClientsMeetAtTheServingRank) {
  TcpStore server("127.0.0.1", 0, /*serve=*/true, std::chrono::seconds(10));
  const uint16_t port = server.port();
  ASSERT_GT(port, 0);
  // A client asks before the key is set: it waits for it.
  std::string seen;
  std::thread reader([&] {
    TcpStore client("127.0.0.1", port, false, std::chrono::seconds(10));
    seen = text(client.get("rank1/address"));
    client.set("rank2/ready", bytes("yes"));
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  TcpStore writer("localhost", port, false, std::chrono::seconds(10));
  writer.set("rank1/address", bytes(std::string("10.0.0.1:\0:tail", 15)));
  reader.join();
  EXPECT_EQ(seen, std::string("10.0.0.1:\0:tail", 15));
  EXPECT_EQ(text(server.get("rank2/ready")), "yes");
  // Values may be replaced and may be empty.
  server.set("rank2/ready", {});
  EXPECT_TRUE(writer.get("rank2/ready").empty());
}

TEST(TcpStore, AKeyNeverSetEndsTheWaitNamingIt) {
  TcpStore server("127.0.0.1", 0, true, std::chrono::milliseconds(300));
  try {
    server.get("rank3/address");
    FAIL() << "a key never set was found";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'rank3/address' was not set"), std::string::npos) << e.what();
  }
}

TEST(TcpStore, NoServerEndsTheClientNamingTheAddress) {
  // A port nobody serves: bind one, keep nothing listening on it.
  uint16_t port = 0;
  { port = TcpStore("127.0.0.1", 0, true, std::chrono::seconds(1)).port(); }
  try {
    TcpStore client("127.0.0.1", port, false, std::chrono::milliseconds(300));
    FAIL() << "connected to nothing";
  } catch (const Error& e) {
    EXPECT_NE(e.thing().find("127.0.0.1:" + std::to_string(port)), std::string::npos) << e.what();
  }
}

TEST(TcpStore, AServerThatEndsEndsItsClients) {
  auto server = std::make_unique<TcpStore>("127.0.0.1", 0, true, std::chrono::seconds(5));
  TcpStore client("127.0.0.1", server->port(), false, std::chrono::seconds(5));
  server.reset();
  EXPECT_THROW(client.get("anything"), Error);
}

}  // namespace
}  // namespace spillway::dist
