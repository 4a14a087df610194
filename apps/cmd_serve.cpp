// attnmt serve --run DIR [--run DIR ...] [--host H] [--port P] [--checkpoint best|last|FILE] [limits]
// A translation server with OpenNMT-py's REST API and a page at / (docs/serve.md). Runs are loaded once, read-only.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>

#include <cstdio>
#include <thread>

#include <spdlog/spdlog.h>

#include "commands.h"
#include "common/errors.h"
#include "serve/http.h"
#include "serve/service.h"

namespace attnmt::cli {

namespace {
int g_signal_pipe[2] = {-1, -1};
void on_signal(int) {
  const char c = 's';
  [[maybe_unused]] ssize_t n = ::write(g_signal_pipe[1], &c, 1);
}
}  // namespace

Command setup_serve(CLI::App& parent, const GlobalOptions& g) {
  struct Options {
    ServeConfig svc;
    HttpOptions http;
  };
  auto opt = std::make_shared<Options>();
  auto* app = parent.add_subcommand("serve", "Serve trained runs over HTTP: OpenNMT-py's REST API and a page with the attention");
  app->add_option("--run,-r", opt->svc.runs, "Run directory (repeatable; model ids 100, 101, ... in this order)")->required();
  app->add_option("--host", opt->http.host, "Address to listen on")->capture_default_str();
  app->add_option("--port", opt->http.port, "Port (0: any free port, printed at start)")->capture_default_str()->check(CLI::Range(0, 65535));
  app->add_option("--token", opt->http.token, "Ask API requests for 'Authorization: Bearer TOKEN' (401 without); the page takes it from its URL's #token=");
  app->add_option("--allow-host", opt->http.allow_hosts, "A host name the Host header may give besides localhost and addresses (repeatable; 403 otherwise)");
  app->add_option("--checkpoint", opt->svc.checkpoint, "best | last | a checkpoint file (every run)")->capture_default_str();
  app->add_option("--max-batch", opt->svc.max_batch, "Sentences decoded together, across the requests waiting")
      ->capture_default_str()->check(CLI::Range(1, 4096));
  app->add_option("--http-threads", opt->http.threads, "API requests handled at once (more wait their turn)")
      ->capture_default_str()->check(CLI::Range(1, 4096));
  app->add_option("--request-timeout", opt->http.request_timeout_s,
                  "Seconds a request's header and body may take to arrive whole (the connection is closed after)")
      ->capture_default_str()->check(CLI::Range(0.05, 3600.0));
  app->add_option("--max-header-bytes", opt->http.max_header_bytes, "Largest request line and header together (431 above)")
      ->capture_default_str()->check(CLI::Range(256, 1 << 20));
  app->add_option("--max-connections", opt->http.max_connections,
                  "Connections open at once (the slowest receiving its request is closed to make room)")
      ->capture_default_str()->check(CLI::Range(1, 100000));
  app->add_option("--max-connections-per-client", opt->http.max_connections_per_client, "Connections open at once from one address")
      ->capture_default_str()->check(CLI::Range(1, 100000));
  app->add_option("--max-request-bytes", opt->svc.limits.max_request_bytes, "Largest request body (413 above)")
      ->capture_default_str()->check(CLI::Range(int64_t{64}, int64_t{1} << 32));
  app->add_option("--max-sentences", opt->svc.limits.max_sentences, "Sentences in one request (413 above)")
      ->capture_default_str()->check(CLI::Range(1, 1 << 20));
  app->add_option("--max-words", opt->svc.limits.max_words, "Words in one sentence (400 above)")->capture_default_str()->check(CLI::Range(1, 1 << 20));
  app->add_option("--max-tokens", opt->svc.limits.max_tokens, "Tokens (or subword pieces) of one sentence after tokenization (413 above)")
      ->capture_default_str()->check(CLI::Range(1, 1 << 20));
  app->add_option("--max-cost", opt->svc.limits.max_cost, "A request's tokens times its beam size, summed over its sentences (413 above)")
      ->capture_default_str()->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  app->add_option("--max-queue", opt->svc.limits.max_queue, "Sentences waiting for one model (503 when full)")
      ->capture_default_str()->check(CLI::Range(1, 1 << 24));
  app->add_option("--timeout", opt->svc.limits.timeout_s, "Seconds a request may wait for its translation (503 after)")
      ->capture_default_str()->check(CLI::Range(0.001, 86400.0));
  app->add_option("--max-beam", opt->svc.limits.max_beam, "Largest beam_size and n_best a request may ask for")
      ->capture_default_str()->check(CLI::Range(1, 100));
  return {app, [opt, &g]() -> int {
            if (!g.device.empty()) opt->svc.device = g.device;
            if (!http_available())
              throw UsageError("serve: this attnmt was built without Boost.Beast (Debian: libboost-dev, which scripts/setup.sh installs); rebuild");
            TranslationService svc(opt->svc);
            HttpServer server(svc, opt->http);
            // SIGINT and SIGTERM: the handler (whichever thread takes the signal) writes a byte to a pipe; a thread that
            // reads it stops the server, which answers what is in flight before run() returns.
            if (::pipe2(g_signal_pipe, O_CLOEXEC) != 0) throw Error("serve: cannot create a pipe");
            struct sigaction sa {};
            sa.sa_handler = on_signal;
            sigemptyset(&sa.sa_mask);
            sigaction(SIGINT, &sa, nullptr);
            sigaction(SIGTERM, &sa, nullptr);
            std::thread signals([&] {
              char c = 0;
              while (::read(g_signal_pipe[0], &c, 1) < 0 && errno == EINTR) {
              }
              if (c != 'q') spdlog::info("signal: stopping (requests being decoded get a second to finish)");
              server.stop();
            });
            // An IPv6 address goes in brackets in a URL (RFC 3986): http://[::1]:5075/.
            const std::string& h = opt->http.host;
            const std::string url_host = h.find(':') != std::string::npos ? "[" + h + "]" : h;
            if (!is_loopback(h))
              spdlog::warn("serve: listening on {}, which other machines may reach; {}", h,
                           opt->http.token.empty() ? "there is no authentication: anyone who reaches it can use it (--token asks for one)"
                                                   : "API requests need the --token");
            const std::string fragment = opt->http.token.empty() ? "" : "#token=" + opt->http.token;
            std::printf("serving %zu model(s) on http://%s:%d/%s (Ctrl-C stops)\n", opt->svc.runs.size(), url_host.c_str(),
                        server.port(), fragment.c_str());
            std::fflush(stdout);
            server.run();
            const char q = 'q';  // the server ended on its own: let the signal thread go
            if (::write(g_signal_pipe[1], &q, 1) != 1) spdlog::warn("serve: cannot wake the signal thread");
            signals.join();
            std::signal(SIGINT, SIG_DFL);
            std::signal(SIGTERM, SIG_DFL);
            svc.stop();
            ServeStats s = svc.stats();
            spdlog::info("stopped: {} requests, {} sentences in {} batches, {} refused", s.requests, s.sentences, s.batches, s.refused);
            return 0;
          }};
}

}  // namespace attnmt::cli
