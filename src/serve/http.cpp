#include "serve/http.h"

#include <arpa/inet.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <string>
#include <thread>

#include <spdlog/spdlog.h>

#include "common/errors.h"

#ifdef ATTNMT_HAVE_HTTPLIB
#include <httplib.h>
#endif

namespace attnmt {

namespace {
bool http_is_ip_address(const std::string& h) {
  unsigned char buf[16];
  return ::inet_pton(AF_INET, h.c_str(), buf) == 1 || ::inet_pton(AF_INET6, h.c_str(), buf) == 1;
}
std::string http_lowercase(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}
}  // namespace

bool host_allowed(const std::string& host_header, const std::vector<std::string>& allow_hosts) {
  std::string h = http_lowercase(host_header);
  if (h.empty()) return true;
  if (h.front() == '[') {  // [v6]:port
    const auto close = h.find(']');
    h = close == std::string::npos ? h : h.substr(1, close - 1);
  } else if (std::count(h.begin(), h.end(), ':') == 1) {  // name:port or v4:port
    h = h.substr(0, h.find(':'));
  }
  if (!h.empty() && h.back() == '.') h.pop_back();  // "localhost." is "localhost"
  if (h == "localhost" || http_is_ip_address(h)) return true;
  for (const auto& a : allow_hosts)
    if (http_lowercase(a) == h) return true;
  return false;
}

bool is_loopback(const std::string& host) {
  if (host == "localhost" || host == "::1") return true;
  unsigned char v4[4];
  return ::inet_pton(AF_INET, host.c_str(), v4) == 1 && v4[0] == 127;
}

#ifdef ATTNMT_HAVE_HTTPLIB

bool http_available() { return true; }

namespace {

constexpr const char* kJson = "application/json; charset=utf-8";

void send(httplib::Response& res, const ApiReply& r) {
  res.status = r.status;
  // An error message may quote the request's bytes (a JSON parse error does): invalid UTF-8 there is replaced.
  res.set_content(r.body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), kJson);
}

// The method a path of the API answers ("" for a path it does not have).
std::string method_of(const std::string& path) {
  for (const char* root : {"", "/translator"}) {
    const std::string r = root;
    if (path == r + "/translate" || path == r + "/explain") return "POST";
    if (path == r + "/models" || path == r + "/health") return "GET";
  }
  return path == "/" || path == "/index.html" ? "GET" : "";
}

// A Content-Type's media type, lowercased, without its parameters: "Application/JSON; charset=utf-8" -> "application/json".
std::string media_type(const std::string& content_type) {
  std::string t = content_type.substr(0, content_type.find(';'));
  t.erase(0, t.find_first_not_of(" \t"));
  t.erase(t.find_last_not_of(" \t") + 1);
  for (char& c : t) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return t;
}

// "Bearer TOKEN" against the token, in time that does not depend on where they differ.
bool token_matches(const std::string& authorization, const std::string& token) {
  const std::string prefix = "Bearer ";
  if (authorization.size() != prefix.size() + token.size() || authorization.compare(0, prefix.size(), prefix) != 0) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < token.size(); ++i) diff |= static_cast<unsigned char>(authorization[prefix.size() + i] ^ token[i]);
  return diff == 0;
}

// What httplib answers by itself (an unknown path, a known path with another method, a body over the limit, a
// malformed request) in the API's form.
void answer_error(TranslationService& svc, const httplib::Request& req, httplib::Response& res) {
  if (!res.body.empty()) return;
  std::string msg;
  const std::string allowed = res.status == 404 ? method_of(req.path) : "";
  if (!allowed.empty()) {
    res.status = 405;
    res.set_header("Allow", allowed);
    msg = req.method + " " + req.path + ": method not allowed (use " + allowed + ")";
  } else if (res.status == 404) {
    msg = "no such path: " + req.method + " " + req.path + " (POST /translator/translate, POST /translator/explain, GET /models, GET /health, GET /)";
  }
  if (res.status == 413) msg = "the request is over the limit of " + std::to_string(svc.limits().max_request_bytes) + " bytes (--max-request-bytes)";
  if (msg.empty() && res.status == 400)
    msg = "the HTTP request could not be read: a malformed request line, header, Content-Length or chunked body";
  if (msg.empty() && res.status == 414) msg = "the request's path is too long";
  if (msg.empty()) msg = "HTTP " + std::to_string(res.status);
  send(res, api_error(res.status, msg));
}

// An exception out of a handler: 500 with its message, logged.
void answer_exception(httplib::Response& res, std::exception_ptr ep) {
  std::string what = "unknown";
  try {
    std::rethrow_exception(ep);
  } catch (const std::exception& e) {
    what = e.what();
  } catch (...) {
  }
  spdlog::error("serve: {}", what);
  send(res, api_error(500, "internal error: " + what));
}

}  // namespace

struct HttpServer::Impl {
  TranslationService& svc;
  httplib::Server server;
  int port = 0;
  std::atomic<bool> stop_requested{false}, finished{false};
  int listen_fd = -1;
  explicit Impl(TranslationService& s) : svc(s) {}
};

HttpServer::HttpServer(TranslationService& service, const HttpOptions& opt) : impl_(std::make_unique<Impl>(service)) {
  httplib::Server& s = impl_->server;
  TranslationService& svc = impl_->svc;
  const int threads = opt.threads;
  s.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  s.set_read_timeout(opt.read_timeout_s, 0);
  s.set_write_timeout(opt.read_timeout_s, 0);
  s.set_keep_alive_timeout(2);
  s.set_payload_max_length(static_cast<size_t>(svc.limits().max_request_bytes));
  // Before any route: the Host header (a DNS-rebinding guard), then the token for the API (the page itself is served
  // without it: it carries no data, and takes the token from its URL's #token= to send with its requests).
  s.set_pre_routing_handler([opt](const httplib::Request& req, httplib::Response& res) {
    if (!host_allowed(req.get_header_value("Host"), opt.allow_hosts)) {
      send(res, api_error(403, "Host '" + req.get_header_value("Host") +
                                   "' is not this server's name (serve --allow-host NAME admits a name)"));
      return httplib::Server::HandlerResponse::Handled;
    }
    const bool page = req.path == "/" || req.path == "/index.html";
    if (!opt.token.empty() && !page && !token_matches(req.get_header_value("Authorization"), opt.token)) {
      res.set_header("WWW-Authenticate", "Bearer");
      send(res, api_error(401, "this server asks for a token: send 'Authorization: Bearer TOKEN' (serve --token)"));
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  auto page = [](const httplib::Request&, httplib::Response& res) { res.set_content(serve_page(), "text/html; charset=utf-8"); };
  auto models = [&svc](const httplib::Request&, httplib::Response& res) { send(res, {200, svc.models()}); };
  auto health = [&svc](const httplib::Request&, httplib::Response& res) { send(res, {200, svc.health()}); };
  // JSON only: a page elsewhere can POST text/plain or a form to a loopback server without asking first (no CORS
  // preflight); application/json it cannot.
  auto json_only = [](const httplib::Request& req, httplib::Response& res) {
    const std::string type = media_type(req.get_header_value("Content-Type"));
    if (type == "application/json") return true;
    send(res, api_error(415, "the body must be JSON, sent as Content-Type: application/json (got " +
                                 (type.empty() ? std::string("none") : "'" + type + "'") + ")"));
    return false;
  };
  auto translate = [&svc, json_only](const httplib::Request& req, httplib::Response& res) {
    if (json_only(req, res)) send(res, svc.translate(req.body));
  };
  auto explain = [&svc, json_only](const httplib::Request& req, httplib::Response& res) {
    if (json_only(req, res)) send(res, svc.explain(req.body));
  };
  s.Get("/", page);
  s.Get("/index.html", page);
  for (const char* root : {"", "/translator"}) {
    const std::string r = root;
    s.Get(r + "/models", models);
    s.Get(r + "/health", health);
    s.Post(r + "/translate", translate);
    s.Post(r + "/explain", explain);
  }
  s.set_error_handler([&svc](const httplib::Request& req, httplib::Response& res) { answer_error(svc, req, res); });
  s.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) { answer_exception(res, ep); });
  // httplib's default socket options add SO_REUSEPORT, with which a second server could share the port: only
  // SO_REUSEADDR here. The descriptor is kept to raise the listen backlog below.
  s.set_socket_options([impl = impl_.get()](int fd) {
    int yes = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    impl->listen_fd = fd;
  });
  if (opt.port == 0) {
    impl_->port = s.bind_to_any_port(opt.host);
    if (impl_->port <= 0) throw UsageError("serve: cannot listen on " + opt.host + " (any port)");
  } else {
    if (!s.bind_to_port(opt.host, opt.port))
      throw UsageError("serve: cannot listen on " + opt.host + ":" + std::to_string(opt.port) + " (in use, or not this machine's address); try --port 0 for any free port");
    impl_->port = opt.port;
  }
  // httplib listens with a backlog of 5: 32 clients connecting at once overflow it and some connections stall. Linux
  // takes a second listen() on the socket as a new backlog.
  if (impl_->listen_fd >= 0) ::listen(impl_->listen_fd, SOMAXCONN);
}

HttpServer::~HttpServer() = default;
int HttpServer::port() const { return impl_->port; }
void HttpServer::run() {
  if (!impl_->stop_requested) impl_->server.listen_after_bind();
  impl_->finished = true;
}

void HttpServer::stop() {
  impl_->stop_requested = true;
  // A stop that comes while run() is starting waits for it to listen (httplib's stop() does nothing before).
  for (int i = 0; i < 1000 && !impl_->server.is_running() && !impl_->finished; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  impl_->server.stop();
}

HttpResult http_request(const std::string& host, int port, const std::string& method, const std::string& path,
                        const std::string& body, double timeout_s, const std::string& content_type) {
  httplib::Client c(host, port);
  const auto sec = static_cast<time_t>(timeout_s);
  const auto usec = static_cast<time_t>((timeout_s - static_cast<double>(sec)) * 1e6);
  c.set_connection_timeout(sec, usec);
  c.set_read_timeout(sec, usec);
  c.set_write_timeout(sec, usec);
  httplib::Result r = method == "GET"      ? c.Get(path)
                      : method == "DELETE" ? c.Delete(path)
                                           : c.Post(path, body, content_type);
  HttpResult out;
  if (!r) {
    out.error = httplib::to_string(r.error());
    return out;
  }
  out.status = r->status;
  out.body = r->body;
  return out;
}

#else  // built without cpp-httplib

bool http_available() { return false; }
struct HttpServer::Impl {};
HttpServer::HttpServer(TranslationService&, const HttpOptions&) {
  throw UsageError("serve: this attnmt was built without cpp-httplib (Debian: libcpp-httplib-dev; scripts/setup.sh installs it); rebuild");
}
HttpServer::~HttpServer() = default;
int HttpServer::port() const { return 0; }
void HttpServer::run() {}
void HttpServer::stop() {}
HttpResult http_request(const std::string&, int, const std::string&, const std::string&, const std::string&, double,
                        const std::string&) {
  return {0, "", "built without cpp-httplib"};
}

#endif

}  // namespace attnmt
