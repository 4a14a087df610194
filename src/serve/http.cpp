#include "serve/http.h"

#include <arpa/inet.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <list>
#include <optional>
#include <string>
#include <utility>

#include <spdlog/spdlog.h>

#include "common/errors.h"

#ifdef ATTNMT_HAVE_BEAST
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
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

#ifdef ATTNMT_HAVE_BEAST

bool http_available() { return true; }

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = net::ip::tcp;

namespace {

constexpr const char* kJson = "application/json; charset=utf-8";
using Clock = std::chrono::steady_clock;

Clock::duration seconds(double s) { return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s)); }

// A response before it is written.
struct Answer {
  int status = 200;
  std::string body;
  std::string content_type = kJson;
  std::vector<std::pair<std::string, std::string>> headers;
  bool close = false;  // the connection is closed after it (the request could not be read whole)
};
Answer json_answer(const ApiReply& r) {
  // An error message may quote the request's bytes (a JSON parse error does): invalid UTF-8 there is replaced.
  Answer a;
  a.status = r.status;
  a.body = r.body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return a;
}
Answer error_answer(int status, const std::string& message) { return json_answer(api_error(status, message)); }

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
  return http_lowercase(t);
}

// "Bearer TOKEN" against the token, in time that does not depend on where they differ.
bool token_matches(const std::string& authorization, const std::string& token) {
  const std::string prefix = "Bearer ";
  if (authorization.size() != prefix.size() + token.size() || authorization.compare(0, prefix.size(), prefix) != 0) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < token.size(); ++i) diff |= static_cast<unsigned char>(authorization[prefix.size() + i] ^ token[i]);
  return diff == 0;
}

using Request = bhttp::request<bhttp::string_body>;

// What a request that could be read asks, decided without the model: an answer, or (api) a call of the service.
struct Routed {
  std::optional<Answer> answer;
  bool explain = false;  // the API call: explain, else translate
};

Routed route(TranslationService& svc, const HttpOptions& opt, const Request& req) {
  const std::string target(req.target());
  const std::string path = target.substr(0, target.find('?'));
  const std::string method(req.method_string());
  const std::string host(req[bhttp::field::host]);
  // The Host header (a DNS-rebinding guard), then the token for the API (the page itself is served without it: it
  // carries no data, and takes the token from its URL's #token= to send with its requests).
  if (!host_allowed(host, opt.allow_hosts))
    return {error_answer(403, "Host '" + host + "' is not this server's name (serve --allow-host NAME admits a name)")};
  const bool page = path == "/" || path == "/index.html";
  if (!opt.token.empty() && !page && !token_matches(std::string(req[bhttp::field::authorization]), opt.token)) {
    Answer a = error_answer(401, "this server asks for a token: send 'Authorization: Bearer TOKEN' (serve --token)");
    a.headers.emplace_back("WWW-Authenticate", "Bearer");
    return {a};
  }
  const std::string allowed = method_of(path);
  if (allowed.empty())
    return {error_answer(404, "no such path: " + method + " " + path +
                                  " (POST /translator/translate, POST /translator/explain, GET /models, GET /health, GET /)")};
  if (method != allowed) {
    Answer a = error_answer(405, method + " " + path + ": method not allowed (use " + allowed + ")");
    a.headers.emplace_back("Allow", allowed);
    return {a};
  }
  if (page) {
    Answer a;
    a.body = serve_page();
    a.content_type = "text/html; charset=utf-8";
    return {a};
  }
  if (path.size() >= 7 && path.compare(path.size() - 7, 7, "/models") == 0) return {json_answer({200, svc.models()})};
  if (path.size() >= 7 && path.compare(path.size() - 7, 7, "/health") == 0) return {json_answer({200, svc.health()})};
  // JSON only: a page elsewhere can POST text/plain or a form to a loopback server without asking first (no CORS
  // preflight); application/json it cannot.
  const std::string type = media_type(std::string(req[bhttp::field::content_type]));
  if (type != "application/json")
    return {error_answer(415, "the body must be JSON, sent as Content-Type: application/json (got " +
                                  (type.empty() ? std::string("none") : "'" + type + "'") + ")")};
  return {std::nullopt, path.size() >= 8 && path.compare(path.size() - 8, 8, "/explain") == 0};
}

// Why a request could not be read, for the client (nullopt: nothing to answer, the connection just closes).
std::optional<Answer> unreadable(const beast::error_code& ec, const HttpOptions& opt, int64_t max_body) {
  if (ec == bhttp::error::header_limit)
    return error_answer(431, "the request line and header are over the limit of " + std::to_string(opt.max_header_bytes) + " bytes");
  if (ec == bhttp::error::body_limit)
    return error_answer(413, "the request is over the limit of " + std::to_string(max_body) + " bytes (--max-request-bytes)");
  if (ec.category() == bhttp::make_error_code(bhttp::error::bad_method).category() && ec != bhttp::error::end_of_stream &&
      ec != bhttp::error::partial_message)
    return error_answer(400, "the HTTP request could not be read: " + ec.message());
  return std::nullopt;  // the client closed, reset or was too slow (the deadline closed the connection)
}

}  // namespace

class Session;

struct HttpServer::Impl {
  TranslationService& svc;
  HttpOptions opt;
  std::list<Session*> sessions;  // open connections, in the order they came; touched on the I/O thread only
  net::io_context io{1};
  tcp::acceptor acceptor{io};
  net::steady_timer retry{io}, grace{io}, hard{io};
  net::thread_pool pool;  // the API calls: each blocks while its request waits for the model
  bool stopping = false, destroying = false;  // I/O thread
  int port = 0;

  Impl(TranslationService& s, const HttpOptions& o) : svc(s), opt(o), pool(static_cast<size_t>(std::max(1, o.threads))) {}
  ~Impl() { destroying = true; }
  void accept();
  bool make_room(const net::ip::address& from);
  void begin_stop();
  void session_ended();
};

// One connection: read a request (header and body under one deadline and the size bounds), answer it, read the next
// (in order: a pipelined request waits in the buffer), until either side closes. Runs on the I/O thread; an API call
// goes to the pool, its answer comes back here.
class Session : public std::enable_shared_from_this<Session> {
 public:
  enum class Phase { kReading, kHandling, kWriting, kClosing, kClosed };

  Session(HttpServer::Impl& srv, tcp::socket socket, net::ip::address from)
      : srv_(srv), stream_(std::move(socket)), from_(std::move(from)) {}
  ~Session() {
    srv_.sessions.erase(self_);
    if (!srv_.destroying) srv_.session_ended();
  }
  void start() {
    self_ = srv_.sessions.insert(srv_.sessions.end(), this);
    read();
  }
  Phase phase() const { return phase_; }
  const net::ip::address& from() const { return from_; }
  Clock::time_point since() const { return since_; }
  bool receiving() const { return phase_ == Phase::kReading && parser_ && parser_->got_some(); }  // a request begun, not whole
  void close_now() {
    phase_ = Phase::kClosed;
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.socket().close(ec);
  }

 private:
  void read() {
    if (srv_.stopping) return close_now();
    parser_.emplace();
    parser_->header_limit(static_cast<std::uint32_t>(srv_.opt.max_header_bytes));
    parser_->body_limit(static_cast<std::uint64_t>(srv_.svc.limits().max_request_bytes));
    phase_ = Phase::kReading;
    since_ = Clock::now();
    ++generation_;
    stream_.expires_after(seconds(srv_.opt.request_timeout_s));  // the whole request, header and body
    bhttp::async_read_header(stream_, buffer_, *parser_, [self = shared_from_this()](beast::error_code ec, size_t) { self->on_header(ec); });
  }
  void on_header(beast::error_code ec) {
    if (ec) return on_error(ec);
    // "Expect: 100-continue" (curl sends it with a body over 1 KiB): the client waits for this before the body.
    if (http_lowercase(std::string(parser_->get()[bhttp::field::expect])) == "100-continue") {
      auto cont = std::make_shared<bhttp::response<bhttp::empty_body>>(bhttp::status::continue_, parser_->get().version());
      bhttp::async_write(stream_, *cont, [self = shared_from_this(), cont](beast::error_code e, size_t) {
        if (e) return self->close_now();
        self->read_body();
      });
      return;
    }
    read_body();
  }
  void read_body() {
    bhttp::async_read(stream_, buffer_, *parser_, [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec) return self->on_error(ec);
      self->handle(self->parser_->release());
    });
  }
  void on_error(const beast::error_code& ec) {
    if (phase_ == Phase::kClosed || srv_.stopping) return close_now();
    std::optional<Answer> a = unreadable(ec, srv_.opt, srv_.svc.limits().max_request_bytes);
    if (!a) return close_now();
    a->close = true;  // what follows on the connection cannot be trusted to be a request
    version_ = 11;
    write(std::move(*a));
  }

  void handle(Request req) {
    version_ = req.version();
    keep_alive_ = req.keep_alive();
    Routed r = route(srv_.svc, srv_.opt, req);
    if (r.answer) return write(std::move(*r.answer));
    phase_ = Phase::kHandling;
    stream_.expires_never();  // the service has its own deadline (--timeout)
    closed_ = std::make_shared<std::atomic<bool>>(false);
    watch_for_close(generation_);
    net::post(srv_.pool, [self = shared_from_this(), explain = r.explain, body = std::move(req.body()), closed = closed_]() mutable {
      const ClientClosed gone = [closed] { return closed->load(); };
      ApiReply reply;
      try {
        reply = explain ? self->srv_.svc.explain(body, gone) : self->srv_.svc.translate(body, gone);
      } catch (const std::exception& e) {
        spdlog::error("serve: {}", e.what());
        reply = api_error(500, std::string("internal error: ") + e.what());
      }
      // The session moves to the I/O thread: its last owner, whoever drops it, is never this thread.
      net::io_context& io = self->srv_.io;
      net::post(io, [self = std::move(self), a = json_answer(reply)]() mutable { self->write(std::move(a)); });
    });
  }
  // While its request is handled, whether the client closes its side (FIN) or resets: the service may then drop the
  // request (serve/service.h's ClientClosed). Bytes of a pipelined request end the watch; they are read in their turn.
  void watch_for_close(uint64_t generation) {
    stream_.socket().async_wait(tcp::socket::wait_read, [self = shared_from_this(), generation](beast::error_code ec) {
      if (generation != self->generation_ || self->phase_ != Phase::kHandling) return;
      if (ec) {
        if (ec != net::error::operation_aborted) self->closed_->store(true);
        return;
      }
      char c = 0;
      const ssize_t n = ::recv(self->stream_.socket().native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        self->closed_->store(true);
      } else if (n < 0) {
        self->watch_for_close(generation);
      }
    });
  }

  void write(Answer a) {
    if (phase_ == Phase::kClosed) return;
    const bool close = a.close || !keep_alive_ || srv_.stopping || (closed_ && closed_->load());
    auto res = std::make_shared<bhttp::response<bhttp::string_body>>(static_cast<bhttp::status>(a.status), version_);
    res->set(bhttp::field::server, "attnmt");
    res->set(bhttp::field::content_type, a.content_type);
    for (const auto& [k, v] : a.headers) res->set(k, v);
    res->body() = std::move(a.body);
    res->keep_alive(!close);
    res->prepare_payload();
    phase_ = Phase::kWriting;
    stream_.expires_after(seconds(srv_.opt.request_timeout_s));
    bhttp::async_write(stream_, *res, [self = shared_from_this(), res, close](beast::error_code ec, size_t) {
      if (ec) return self->close_now();
      if (close) return self->linger();
      self->closed_.reset();
      self->read();
    });
  }
  // Closing after an answer: the sending side first, then what the client still sends is read and dropped (for up to
  // a second or 4 MiB) so that the answer is not lost to a reset (the client may still be sending a body refused unread).
  void linger() {
    phase_ = Phase::kClosing;
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    stream_.expires_after(std::chrono::seconds(1));
    drain();
  }
  void drain() {
    stream_.async_read_some(net::buffer(scratch_), [self = shared_from_this()](beast::error_code ec, size_t n) {
      self->drained_ += n;
      if (ec || self->srv_.stopping || self->drained_ > (4u << 20)) return self->close_now();
      self->drain();
    });
  }

  HttpServer::Impl& srv_;
  beast::tcp_stream stream_;
  net::ip::address from_;
  std::list<Session*>::iterator self_;
  beast::flat_buffer buffer_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  std::shared_ptr<std::atomic<bool>> closed_;  // the client closed while its request was handled
  Phase phase_ = Phase::kReading;
  Clock::time_point since_ = Clock::now();
  uint64_t generation_ = 0;
  unsigned version_ = 11;
  bool keep_alive_ = true;
  size_t drained_ = 0;
  char scratch_[16384];
};

void HttpServer::Impl::accept() {
  acceptor.async_accept([this](beast::error_code ec, tcp::socket socket) {
    if (stopping || ec == net::error::operation_aborted) return;
    if (ec) {  // out of descriptors, say: wait a little rather than spin
      spdlog::warn("serve: accept: {}", ec.message());
      retry.expires_after(std::chrono::milliseconds(50));
      retry.async_wait([this](beast::error_code e) {
        if (!e) accept();
      });
      return;
    }
    beast::error_code e;
    socket.set_option(tcp::no_delay(true), e);
    const net::ip::address from = socket.remote_endpoint(e).address();
    if (!make_room(from)) {
      // Every connection is busy with a request: say so in one non-blocking write, then close.
      const std::string body = api_error(503, "too many connections (--max-connections " + std::to_string(opt.max_connections) +
                                                  ", --max-connections-per-client " + std::to_string(opt.max_connections_per_client) +
                                                  "); retry later").body.dump();
      const std::string text = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: " +
                               std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
      [[maybe_unused]] ssize_t n = ::send(socket.native_handle(), text.data(), text.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
      socket.close(e);
    } else {
      std::make_shared<Session>(*this, std::move(socket), from)->start();
    }
    accept();
  });
}

// Whether a new connection from `from` fits the bounds, after closing one to make room if needed: the one lingering
// after its answer, else the one that has been receiving its request longest (a slow client), else the longest idle.
// A connection whose request is being handled or answered is never closed for room.
bool HttpServer::Impl::make_room(const net::ip::address& from) {
  int64_t total = 0, mine = 0;
  for (const Session* s : sessions) {
    if (s->phase() == Session::Phase::kClosed) continue;
    ++total;
    if (s->from() == from) ++mine;
  }
  auto evict = [&](bool same_client) {
    Session* victim = nullptr;
    auto rank = [](const Session* s) { return s->phase() == Session::Phase::kClosing ? 0 : s->receiving() ? 1 : 2; };
    for (Session* s : sessions) {
      const auto p = s->phase();
      if ((p != Session::Phase::kReading && p != Session::Phase::kClosing) || (same_client && s->from() != from)) continue;
      if (!victim || rank(s) < rank(victim) || (rank(s) == rank(victim) && s->since() < victim->since())) victim = s;
    }
    if (victim) victim->close_now();
    return victim != nullptr;
  };
  if (mine >= opt.max_connections_per_client) {
    if (!evict(true)) return false;
    --total;
  }
  return total < opt.max_connections || evict(false);
}

void HttpServer::Impl::begin_stop() {
  if (stopping) return;
  stopping = true;
  beast::error_code ec;
  acceptor.close(ec);
  retry.cancel();
  for (Session* s : sessions)
    if (s->phase() == Session::Phase::kReading || s->phase() == Session::Phase::kClosing) s->close_now();
  // Requests being handled get a second; then the service answers them 503 and drops their decoding; whatever is
  // still open at 1.8 s is left to the destructor.
  grace.expires_after(std::chrono::seconds(1));
  grace.async_wait([this](beast::error_code e) {
    if (!e) svc.cancel();
  });
  hard.expires_after(std::chrono::milliseconds(1800));
  hard.async_wait([this](beast::error_code e) {
    if (!e) io.stop();
  });
  session_ended();
}

void HttpServer::Impl::session_ended() {
  if (stopping && sessions.empty()) {
    grace.cancel();
    hard.cancel();
  }
}

HttpServer::HttpServer(TranslationService& service, const HttpOptions& opt) : impl_(std::make_unique<Impl>(service, opt)) {
  Impl& s = *impl_;
  // Room for the connections allowed, as far as the hard limit lets the soft one rise.
  rlimit nofile{};
  const auto want = static_cast<rlim_t>(opt.max_connections) + 256;
  if (::getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < want) {
    nofile.rlim_cur = std::min(want, nofile.rlim_max);
    ::setrlimit(RLIMIT_NOFILE, &nofile);
  }
  const std::string where = opt.host + ":" + std::to_string(opt.port);
  beast::error_code ec;
  tcp::resolver resolver(s.io);
  auto found = resolver.resolve(opt.host, std::to_string(opt.port), tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec || found.empty()) throw UsageError("serve: cannot listen on " + where + ": " + (ec ? ec.message() : "no such address"));
  const tcp::endpoint at = found.begin()->endpoint();
  s.acceptor.open(at.protocol(), ec);
  if (!ec) s.acceptor.set_option(net::socket_base::reuse_address(true), ec);  // not SO_REUSEPORT: no second server on the port
  if (!ec) s.acceptor.bind(at, ec);
  if (!ec) s.acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec)
    throw UsageError("serve: cannot listen on " + where + " (" + ec.message() + ": in use, or not this machine's address); try --port 0 for any free port");
  s.port = s.acceptor.local_endpoint().port();
  s.accept();
}

HttpServer::~HttpServer() = default;
int HttpServer::port() const { return impl_->port; }

void HttpServer::run() {
  impl_->io.run();
  // Stopped (or out of work): whatever still waits for a model is answered now, and the pool's threads end.
  impl_->svc.cancel();
  impl_->pool.join();
}

void HttpServer::stop() {
  net::post(impl_->io, [impl = impl_.get()] { impl->begin_stop(); });
}

HttpResult http_request(const std::string& host, int port, const std::string& method, const std::string& path,
                        const std::string& body, double timeout_s, const std::string& content_type) {
  HttpResult out;
  net::io_context io;
  beast::tcp_stream stream(io);
  tcp::resolver resolver(io);
  beast::flat_buffer buffer;
  bhttp::response_parser<bhttp::string_body> parser;
  parser.body_limit(boost::none);
  Request req{bhttp::string_to_verb(method), path, 11};
  req.set(bhttp::field::host, (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(port));
  if (method != "GET" && method != "DELETE") {
    req.set(bhttp::field::content_type, content_type);
    req.body() = body;
  }
  req.prepare_payload();
  beast::error_code failed;
  auto fail = [&](beast::error_code ec) { failed = ec; };
  beast::error_code ec;
  const auto endpoints = resolver.resolve(host, std::to_string(port), ec);
  if (ec) return {0, "", ec.message()};
  stream.expires_after(seconds(timeout_s));  // the whole exchange
  stream.async_connect(endpoints, [&](beast::error_code e, const tcp::endpoint&) {
    if (e) return fail(e);
    bhttp::async_write(stream, req, [&](beast::error_code e2, size_t) {
      if (e2) return fail(e2);
      bhttp::async_read(stream, buffer, parser, [&](beast::error_code e3, size_t) {
        if (e3) return fail(e3);
        out.status = parser.get().result_int();
        out.body = parser.get().body();
      });
    });
  });
  io.run();
  if (failed) out = {0, "", failed == beast::error::timeout ? "timed out" : failed.message()};
  beast::error_code ignored;
  stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
  return out;
}

#else  // built without Boost.Beast

bool http_available() { return false; }
struct HttpServer::Impl {};
HttpServer::HttpServer(TranslationService&, const HttpOptions&) {
  throw UsageError("serve: this attnmt was built without Boost.Beast (Debian: libboost-dev; scripts/setup.sh installs it); rebuild");
}
HttpServer::~HttpServer() = default;
int HttpServer::port() const { return 0; }
void HttpServer::run() {}
void HttpServer::stop() {}
HttpResult http_request(const std::string&, int, const std::string&, const std::string&, const std::string&, double,
                        const std::string&) {
  return {0, "", "built without Boost.Beast"};
}

#endif

}  // namespace attnmt
