// The translation service behind `attnmt serve`, without the HTTP: OpenNMT-py's REST request and response shapes,
// the limits, and one decoding worker per loaded run that decodes the sentences of requests arriving together as one
// batch. serve/http.h puts it on a socket.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "serve/request.h"

namespace attnmt {

struct ServeConfig {
  std::vector<std::string> runs;  // run directories; model ids 100, 101, ... in this order (as OpenNMT-py's conf.json)
  std::string checkpoint = "best";
  std::string device;             // empty: each run's config
  int max_batch = 64;             // sentences decoded together, across requests
  ServeLimits limits;
};

// An answer: the HTTP status and its JSON body ({"status": "error", "error": "..."} for 4xx/5xx).
struct ApiReply {
  int status = 200;
  nlohmann::json body;
};
ApiReply api_error(int status, const std::string& message);

// Counters since the start (GET /health).
struct ServeStats {
  int64_t requests = 0, sentences = 0, batches = 0, refused = 0;
};

// Asked while a request waits for its model: whether its client has closed its side of the connection. TCP cannot
// tell a client that left from one that half-closed and still reads (both send FIN), so such a request is dropped only
// when other requests wait for the same model, or the server stops; otherwise it is decoded and answered.
using ClientClosed = std::function<bool()>;

class TranslationService {
 public:
  // Loads every run (read-only; UsageError naming the run on anything wrong) and starts its worker.
  explicit TranslationService(const ServeConfig& cfg);
  ~TranslationService();  // stop(), then waits for the workers
  TranslationService(const TranslationService&) = delete;
  TranslationService& operator=(const TranslationService&) = delete;

  // POST /translator/translate: body [{"src": "...", "id": 100, ...options}, ...] (see docs/serve.md). Thread-safe;
  // blocks until the sentences are decoded, the time limit passes, the client is gone (above) or the service is
  // cancelled; a request given up is dropped from its batch, and a batch all of whose requests gave up stops at its
  // next decoder step.
  ApiReply translate(const std::string& body, const ClientClosed& closed = {});
  // POST /translator/explain: one attention step of the model's translation (serve/request.h's ExplainRequest), on the
  // model's worker thread in its turn; the JSON of `attnmt explain --format json`.
  ApiReply explain(const std::string& body, const ClientClosed& closed = {});
  nlohmann::json models() const;  // GET /models: one object per run
  nlohmann::json health() const;  // GET /health
  ServeStats stats() const;
  const ServeLimits& limits() const { return cfg_.limits; }
  // New requests are refused (503); what is queued is still decoded and answered.
  void stop();
  // stop(), and every request waiting is answered 503 at once (its decoding dropped): a server's shutdown.
  void cancel();

  class Worker;

 private:
  ServeConfig cfg_;
  std::atomic<bool> cancelled_{false};
  std::atomic<int64_t> requests_{0}, sentences_{0}, refused_{0};
  std::vector<ModelRef> refs_;  // what the request parser knows of each model, in workers_' order
  std::vector<std::unique_ptr<Worker>> workers_;
};

}  // namespace attnmt
