// What the tests of `attnmt serve` share (test_serve.cpp: the API; test_serve_http.cpp: connections and HTTP): two
// small trained runs, a server process on a free port, the API's error shape, and raw HTTP exchanges.
#pragma once
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "support.h"
#include "serve/http.h"
#include "train/trainer.h"

namespace attnmt::test {

using nlohmann::json;

struct ServeRuns {
  std::string corpus, bahdanau, none;
  std::vector<std::string> test_src;
};

// Two small trained runs over one toy corpus (Bahdanau and the fixed context), each evaluated so that /models has its
// BLEU by length. Trained once per test binary run.
inline const ServeRuns& serve_runs() {
  static ServeRuns r = [] {
    ServeRuns s;
    // Small and briefly trained: the tests compare the server with `translate` on the same model, whatever its quality
    // (each test process trains them again; a LibTorch whose OpenBLAS falls back to generic kernels is slow at it).
    s.corpus = tiny_toy_corpus("serve_corpus", 200, 12, 40, 12);
    for (const char* att : {"bahdanau", "none"}) {
      Config c = tiny_config_for(s.corpus, temp_dir(std::string("serve_") + att), att);
      c.model.embed_dim = 16;
      c.model.hidden_dim = 32;
      c.train.epochs = 8;
      c.train.batch_size = 16;
      c.eval.beam_size = 3;
      c.eval.buckets = {5, 10};
      validate(c);
      train(c, {}, torch::kCPU);
      (std::string(att) == "none" ? s.none : s.bahdanau) = c.run_dir;
      CliResult e = run_cli("evaluate --run " + c.run_dir);
      EXPECT_EQ(e.code, 0) << e.output;
    }
    std::ifstream in(s.corpus + "/test.en");
    for (std::string l; std::getline(in, l);) s.test_src.push_back(l);
    return s;
  }();
  return r;
}

// A running `attnmt serve` on a free port; killed (SIGKILL) when the test ends if it is still up.
struct Server {
  pid_t pid = -1;
  int port = 0;
  std::string log;
  ~Server() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }
  HttpResult get(const std::string& path) const { return http_request("127.0.0.1", port, "GET", path); }
  HttpResult post(const std::string& path, const std::string& body) const { return http_request("127.0.0.1", port, "POST", path, body); }
  // Sends SIGTERM and returns the exit code.
  int stop() {
    ::kill(pid, SIGTERM);
    int status = 0;
    ::waitpid(pid, &status, 0);
    pid = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
};

inline std::unique_ptr<Server> start_server(const std::vector<std::string>& extra) {
  auto s = std::make_unique<Server>();
  s->log = temp_dir("serve_log") + "/serve.log";
  std::vector<std::string> args = {"serve", "--port", "0"};
  args.insert(args.end(), extra.begin(), extra.end());
  s->pid = spawn_cli(args, s->log);
  const std::regex listening("on http://(?:\\[[^\\]]*\\]|[^:/]+):([0-9]+)/");
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < until) {
    std::smatch m;
    std::string text = read_file(s->log);
    if (std::regex_search(text, m, listening)) {
      s->port = std::stoi(m[1]);
      break;
    }
    if (::waitpid(s->pid, nullptr, WNOHANG) == s->pid) {
      s->pid = -1;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_GT(s->port, 0) << read_file(s->log);
  return s;
}

inline json parse(const HttpResult& r) {
  json j = json::parse(r.body, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << "not JSON: " << r.body;
  return j;
}

// The status is `status` and the body OpenNMT-style {"status": "error", "error": "..."} with `words` in the message.
inline void expect_error(const HttpResult& r, int status, const std::string& words) {
  EXPECT_EQ(r.status, status) << r.body;
  json j = parse(r);
  ASSERT_TRUE(j.is_object()) << r.body;
  EXPECT_EQ(j.value("status", ""), "error") << r.body;
  EXPECT_NE(j.value("error", "").find(words), std::string::npos) << r.body;
}

// A connected socket to 127.0.0.1:port (-1 when refused); reads time out after 10 s.
inline int connect_to(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}
inline bool send_all(int fd, const std::string& s) { return ::send(fd, s.data(), s.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(s.size()); }
// What the server sends until it closes (or 10 s pass).
inline std::string read_all(int fd) {
  std::string got;
  char buf[4096];
  ssize_t n = 0;
  while ((n = ::recv(fd, buf, sizeof buf, 0)) > 0) got.append(buf, static_cast<size_t>(n));
  return got;
}

// One raw HTTP/1.1 request on a new connection, for what http_request does not send: the answer as received until
// the server closes (send "Connection: close"), or "" when there was none.
inline std::string raw_exchange(int port, const std::string& request) {
  const int fd = connect_to(port);
  if (fd < 0) return "";
  const std::string got = send_all(fd, request) ? read_all(fd) : "";
  ::close(fd);
  return got;
}
// The status of such an answer (0 when there was none).
inline int raw_status(int port, const std::string& request) {
  const std::string got = raw_exchange(port, request);
  std::smatch m;
  return std::regex_search(got, m, std::regex("^HTTP/1\\.[01] ([0-9]{3})")) ? std::stoi(m[1]) : 0;
}


}  // namespace attnmt::test
