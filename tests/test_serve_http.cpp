// attnmt serve's connections, as a hostile or careless client uses them: slow clients (a slowloris) neither stop
// service nor shutdown, header and chunked-body bombs are refused as they arrive, half-closed and pipelined clients
// are answered, a client that leaves mid-decode frees the model, and the connection bounds make room for a new client.
#include <poll.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "serve_support.h"

namespace attnmt::test {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Whether the server has closed the connection (EOF or reset), without waiting.
bool closed_by_server(int fd) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  char c = 0;
  return ::recv(fd, &c, 1, MSG_DONTWAIT | MSG_PEEK) <= 0;
}
int count_of(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}
std::string post_text(const std::string& body, const std::string& extra_headers = "") {
  return "POST /translator/translate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n" + extra_headers + "\r\n" + body;
}

// Clients that open a request and send one more header byte every 200 ms, as long as the server lets them.
struct Slowloris {
  std::vector<int> fds;
  std::atomic<bool> done{false};
  std::thread thread;
  Slowloris(int port, int connections) {
    for (int i = 0; i < connections; ++i) {
      const int fd = connect_to(port);
      if (fd >= 0 && send_all(fd, "POST /translator/translate HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")) fds.push_back(fd);
    }
    thread = std::thread([this] {
      while (!done) {
        for (int fd : fds) ::send(fd, "x", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
      }
    });
  }
  int closed() const {
    int n = 0;
    for (int fd : fds) n += closed_by_server(fd) ? 1 : 0;
    return n;
  }
  ~Slowloris() {
    done = true;
    thread.join();
    for (int fd : fds) ::close(fd);
  }
};

std::string one_sentence(const ServeRuns& runs) { return json::array({{{"src", runs.test_src[0]}}}).dump(); }

// 40 connections trickle their header a byte at a time: a normal request is still answered at once (they hold
// connections, not threads), each trickler is cut when its request's deadline passes, and SIGTERM during a second
// slowloris ends the server within 2 s.
TEST(ServeHttp, SlowClientsNeitherStopServiceNorShutdown) {
  if (!http_available()) GTEST_SKIP() << "built without Boost.Beast (libboost-dev): no serve";
  const ServeRuns& runs = serve_runs();
  auto srv = start_server({"--run", runs.bahdanau, "--request-timeout", "2", "--max-connections", "64"});
  ASSERT_GT(srv->port, 0);
  const auto started = Clock::now();
  auto slow = std::make_unique<Slowloris>(srv->port, 40);
  ASSERT_EQ(slow->fds.size(), 40u);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const auto t = Clock::now();
  HttpResult r = srv->post("/translator/translate", one_sentence(runs));
  const double took = seconds_since(t);
  EXPECT_EQ(r.status, 200) << r.error << r.body;
  EXPECT_LT(took, 1.5) << "a normal request waited behind the slow clients";
  EXPECT_EQ(slow->closed(), 0) << "slow clients cut before their deadline";
  while (seconds_since(started) < 4.0 && slow->closed() < 40) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(slow->closed(), 40) << "the 2 s deadline is on the whole request, not on each read";
  slow.reset();

  Slowloris again(srv->port, 30);
  ASSERT_EQ(again.fds.size(), 30u);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto stop_at = Clock::now();
  EXPECT_EQ(srv->stop(), 0) << read_file(srv->log);
  EXPECT_LT(seconds_since(stop_at), 2.5) << "SIGTERM with slow clients connected";
}

// A header and a chunked body over their bounds are answered (431, 413) while they are still arriving, not after
// they were buffered whole; an impossible Content-Length is 400 at once.
TEST(ServeHttp, HeaderAndChunkedBombsAreRefusedAsTheyArrive) {
  if (!http_available()) GTEST_SKIP() << "built without Boost.Beast (libboost-dev): no serve";
  const ServeRuns& runs = serve_runs();
  auto srv = start_server({"--run", runs.bahdanau, "--max-header-bytes", "4096", "--max-request-bytes", "100000"});
  ASSERT_GT(srv->port, 0);
  {
    const int fd = connect_to(srv->port);
    ASSERT_GE(fd, 0);
    std::string head = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n";
    for (int i = 0; i < 100; ++i) head += "X-Bomb-" + std::to_string(i) + ": " + std::string(100, 'a') + "\r\n";  // ~11 KB, unfinished
    ASSERT_TRUE(send_all(fd, head));
    const std::string got = read_all(fd);
    ::close(fd);
    EXPECT_EQ(got.rfind("HTTP/1.1 431", 0), 0u) << got;
    EXPECT_NE(got.find("over the limit of 4096 bytes"), std::string::npos) << got;
  }
  {
    const int fd = connect_to(srv->port);
    ASSERT_GE(fd, 0);
    std::string req = "POST /translator/translate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";
    for (int i = 0; i < 3; ++i) req += "10000\r\n" + std::string(0x10000, ' ') + "\r\n";  // 3 x 64 KiB, no last chunk
    send_all(fd, req);  // the server may close before the last byte
    const std::string got = read_all(fd);
    ::close(fd);
    EXPECT_EQ(got.rfind("HTTP/1.1 413", 0), 0u) << got.substr(0, 300);
    EXPECT_NE(got.find("over the limit of 100000 bytes"), std::string::npos) << got.substr(0, 300);
  }
  const std::string negative = raw_exchange(srv->port, "POST /translator/translate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                                                       "application/json\r\nContent-Length: -1\r\n\r\n[]");
  EXPECT_EQ(negative.rfind("HTTP/1.1 400", 0), 0u) << negative;
  EXPECT_NE(negative.find("Content-Length"), std::string::npos) << negative;
  EXPECT_EQ(srv->get("/health").status, 200);
  EXPECT_EQ(srv->stop(), 0) << read_file(srv->log);
}

// A client that half-closes after its request still gets the answer; pipelined requests are answered in order on one
// connection; "Expect: 100-continue" gets its 100 before the body is sent.
TEST(ServeHttp, HalfClosedPipelinedAndExpectingClientsAreAnswered) {
  if (!http_available()) GTEST_SKIP() << "built without Boost.Beast (libboost-dev): no serve";
  const ServeRuns& runs = serve_runs();
  auto srv = start_server({"--run", runs.bahdanau});
  ASSERT_GT(srv->port, 0);
  const std::string body = one_sentence(runs);
  {
    const int fd = connect_to(srv->port);
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(send_all(fd, post_text(body)));
    ::shutdown(fd, SHUT_WR);
    const std::string got = read_all(fd);
    ::close(fd);
    EXPECT_EQ(got.rfind("HTTP/1.1 200", 0), 0u) << got;
    EXPECT_NE(got.find("\"tgt\""), std::string::npos) << got;
  }
  {
    const int fd = connect_to(srv->port);
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(send_all(fd, "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" + post_text(body) +
                                 "GET /models HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"));
    const std::string got = read_all(fd);
    ::close(fd);
    EXPECT_EQ(count_of(got, "HTTP/1.1 200"), 3) << got;
    const size_t health = got.find("\"requests\""), translation = got.find("\"tgt\""), models = got.find("\"model_id\"");
    ASSERT_NE(health, std::string::npos) << got;
    ASSERT_NE(translation, std::string::npos) << got;
    ASSERT_NE(models, std::string::npos) << got;
    EXPECT_LT(health, translation);
    EXPECT_LT(translation, models);
  }
  {
    const int fd = connect_to(srv->port);
    ASSERT_GE(fd, 0);
    const std::string all = post_text(body, "Expect: 100-continue\r\nConnection: close\r\n");
    ASSERT_TRUE(send_all(fd, all.substr(0, all.size() - body.size())));
    char buf[256];
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    ASSERT_GT(n, 0);
    EXPECT_EQ(std::string(buf, static_cast<size_t>(n)).rfind("HTTP/1.1 100 Continue", 0), 0u) << std::string(buf, static_cast<size_t>(n));
    ASSERT_TRUE(send_all(fd, body));
    const std::string got = read_all(fd);
    ::close(fd);
    EXPECT_EQ(got.rfind("HTTP/1.1 200", 0), 0u) << got;
  }
  EXPECT_EQ(srv->stop(), 0) << read_file(srv->log);
}

// A client that sends a long decode and leaves: when the next request comes for the model, the first is dropped at
// the next decoder step and the next is answered at once, not after the first's many seconds.
TEST(ServeHttp, AClientThatLeavesMidDecodeFreesTheModel) {
  if (!http_available()) GTEST_SKIP() << "built without Boost.Beast (libboost-dev): no serve";
  const ServeRuns& runs = serve_runs();
  auto srv = start_server({"--run", runs.bahdanau, "--timeout", "120", "--max-sentences", "4096", "--max-request-bytes",
                           "10000000", "--max-cost", "100000000", "--max-batch", "64"});
  ASSERT_GT(srv->port, 0);
  json many = json::array();  // 4,096 sentences at beam 32: about 10 s of decoding here, uncancelled
  for (int i = 0; i < 4096; ++i) many.push_back({{"src", runs.test_src[static_cast<size_t>(i) % runs.test_src.size()]}, {"beam_size", 32}});
  const int fd = connect_to(srv->port);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(send_all(fd, post_text(many.dump())));
  for (int i = 0; i < 400 && parse(srv->get("/health")).value("requests", 0) < 1; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ::close(fd);
  const auto t = Clock::now();
  HttpResult next = http_request("127.0.0.1", srv->port, "POST", "/translator/translate", one_sentence(runs), 8);
  EXPECT_EQ(next.status, 200) << next.error << next.body;
  EXPECT_LT(seconds_since(t), 5.0) << "the model was still busy with the request whose client left";
  EXPECT_EQ(srv->stop(), 0) << read_file(srv->log);
  EXPECT_NE(read_file(srv->log).find("decoding stopped: every request of its batch gave up"), std::string::npos) << read_file(srv->log);
}

// SIGTERM while a long decode is in flight: the server gives it a second, then answers it 503 and exits 0 within 2 s.
TEST(ServeHttp, ShutdownCancelsALongDecodeWithinTwoSeconds) {
  if (!http_available()) GTEST_SKIP() << "built without Boost.Beast (libboost-dev): no serve";
  const ServeRuns& runs = serve_runs();
  auto srv = start_server({"--run", runs.bahdanau, "--timeout", "120", "--max-sentences", "4096", "--max-request-bytes",
                           "10000000", "--max-cost", "100000000", "--max-batch", "64"});
  ASSERT_GT(srv->port, 0);
  json many = json::array();
  for (int i = 0; i < 4096; ++i) many.push_back({{"src", runs.test_src[static_cast<size_t>(i) % runs.test_src.size()]}, {"beam_size", 32}});
  HttpResult answer;
  std::thread client([&] { answer = srv->post("/translator/translate", many.dump()); });
  for (int i = 0; i < 400 && parse(srv->get("/health")).value("requests", 0) < 1; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const auto t = Clock::now();
  EXPECT_EQ(srv->stop(), 0) << read_file(srv->log);
  EXPECT_LT(seconds_since(t), 2.5);
  client.join();
  EXPECT_EQ(answer.status, 503) << answer.error << answer.body.substr(0, 200);
  EXPECT_NE(answer.body.find("shutting down"), std::string::npos) << answer.body.substr(0, 200);
}

// At the bound of connections from one client, a new one closes the connection that has been receiving its request
// longest, and is served.
TEST(ServeHttp, AtTheConnectionBoundTheSlowestMakesRoom) {
  if (!http_available()) GTEST_SKIP() << "built without Boost.Beast (libboost-dev): no serve";
  const ServeRuns& runs = serve_runs();
  auto srv = start_server({"--run", runs.bahdanau, "--max-connections-per-client", "4", "--request-timeout", "30"});
  ASSERT_GT(srv->port, 0);
  std::vector<int> fds;
  for (int i = 0; i < 4; ++i) {
    fds.push_back(connect_to(srv->port));
    ASSERT_GE(fds.back(), 0);
    ASSERT_TRUE(send_all(fds.back(), "GET /health HTTP/1.1\r\n"));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  HttpResult r = srv->get("/health");
  EXPECT_EQ(r.status, 200) << r.error;
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_TRUE(closed_by_server(fds[0])) << "the oldest slow connection was not the one closed";
  for (size_t i = 1; i < fds.size(); ++i) EXPECT_FALSE(closed_by_server(fds[i])) << "connection " << i;
  for (int fd : fds) ::close(fd);
  EXPECT_EQ(srv->stop(), 0) << read_file(srv->log);
}

}  // namespace
}  // namespace attnmt::test
