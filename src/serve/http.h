// `attnmt serve` on a socket: the routes of OpenNMT-py's REST server (POST /translator/translate, GET /translator/models,
// GET /health, with short aliases) and the page at /, over Boost.Beast (Debian's libboost-dev; docs/serve.md says why):
// one thread reads and writes every connection, so a slow client holds a connection, never a thread; each request's
// header and body must arrive whole within a deadline and within size bounds, connections are bounded in all and per
// client address. And a small HTTP client for the tests and the browser test's WebDriver calls. Without Boost.Beast at
// build time, HttpServer refuses to start (UsageError, one line) and http_request answers status 0.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "serve/service.h"

namespace attnmt {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 5000;   // 0: any free port (HttpServer::port() says which)
  int threads = 64;  // API requests handled at once (each waits for its model on one thread); more wait their turn
  // A request's header and body must arrive whole within this many seconds of the connection's wait for it (a keep-
  // alive connection idle that long is closed too); its answer must be read within as long.
  double request_timeout_s = 10;
  int max_header_bytes = 16 * 1024;  // the request line and header fields together (431 above)
  // Connections open at once, in all and from one client address. When a new one would pass a bound, the connection
  // that has spent longest receiving its request (or idling) is closed to make room; 503 when every one is busy.
  int max_connections = 1024;
  int max_connections_per_client = 256;
  std::string token;       // non-empty: the API asks for "Authorization: Bearer TOKEN" (401 without)
  std::vector<std::string> allow_hosts;  // host names a request's Host header may give besides localhost and addresses
};

// Whether a request's Host header (name or address, with or without a port) names this server: an IP address,
// "localhost", or one of allow_hosts. A page elsewhere that rebinds its own name to 127.0.0.1 (DNS rebinding) sends
// that name, and is refused. An empty header (HTTP/1.0) passes.
bool host_allowed(const std::string& host_header, const std::vector<std::string>& allow_hosts);

// Whether an address to listen on is a loopback one (127.0.0.0/8, ::1, localhost): reachable from this machine only.
bool is_loopback(const std::string& host);

// Whether this build has the HTTP server (Boost.Beast was found).
bool http_available();

class HttpServer {
 public:
  // Binds host:port; UsageError when that fails (port in use, bad host) or without Boost.Beast.
  HttpServer(TranslationService& service, const HttpOptions& opt);
  ~HttpServer();
  int port() const;
  // Serves until stop(); then returns within 2 s: connections waiting for a request are closed at once, requests being
  // decoded get 1 s to finish, then the service is cancelled (they are answered 503) and what is still open is closed.
  void run();
  // Thread-safe (not from a signal handler), also before run(): stops accepting connections and makes run() return.
  void stop();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// The page at /: one HTML document with its script inline, no external assets.
const std::string& serve_page();

struct HttpResult {
  int status = 0;  // 0: no answer (connection refused, timed out)
  std::string body;
  std::string error;  // why there was no answer
};
// One request to host:port (method GET, POST or DELETE; a POST's body sent as content_type).
HttpResult http_request(const std::string& host, int port, const std::string& method, const std::string& path,
                        const std::string& body = "", double timeout_s = 30,
                        const std::string& content_type = "application/json");

}  // namespace attnmt
