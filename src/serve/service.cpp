#include "serve/service.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <functional>
#include <future>
#include <mutex>
#include <optional>
#include <thread>

#include <spdlog/spdlog.h>

#include "common/config.h"
#include "common/errors.h"
#include "data/text.h"
#include "eval/bleu.h"
#include "run/run_dir.h"
#include "translate/alignment.h"
#include "translate/explain.h"
#include "translate/translator.h"

namespace attnmt {

namespace fs = std::filesystem;
using nlohmann::json;

ApiReply api_error(int status, const std::string& message) { return {status, json{{"status", "error"}, {"error", message}}}; }

namespace serve_detail {

constexpr int kFirstModelId = 100;

// Which attention the page's map of a translation shows, where the model has more than one ("" where it has one).
std::string map_description(const ModelConfig& m) {
  const int heads = m.attention.heads;
  const std::string mean = heads > 1 ? ", the mean of its " + std::to_string(heads) + " heads" : "";
  if (m.decoder.type == LayerType::kSelfAttention)
    return "cross-attention of the last decoder layer (layer " + std::to_string(m.decoder_layers) + " of " +
           std::to_string(m.decoder_layers) + ")" + mean;
  return heads > 1 ? "the attention" + mean : "";  // model.attention.heads applies to scaled_dot alone
}

// What one request asks of its model (the same for all its sentences).
struct JobOptions {
  int beam = 1, nbest = 1;
  bool weights = false;  // align or attention asked for
  bool same_search(const JobOptions& o) const { return beam == o.beam && nbest == o.nbest; }
};

// The sentences of one request waiting for (or decoded by) a worker.
struct Job {
  std::vector<std::string> lines;
  std::vector<std::vector<std::string>> tokens;  // the lines tokenized (Worker::admit), what is decoded
  JobOptions opt;
  std::promise<std::vector<std::vector<Translation>>> done;
  std::atomic<bool> abandoned{false};  // the request gave up (its deadline, its client, a shutdown): skip it
  std::atomic<bool> taken{false};      // out of the queue: being decoded
  // Something else the model does for a request (an explanation), run alone on the worker's thread; it answers its
  // own promise. Lines: its sentence, counted in the queue like a translation's.
  std::function<void(LoadedRun&)> task;
};

}  // namespace serve_detail
using namespace serve_detail;

// One loaded run and the thread that decodes for it. Requests queue here; the thread takes the oldest one and every
// other waiting one with the same search (beam, n-best), up to max_batch sentences, and decodes them as one call of
// Translator::nbest (length-sorted batches). The model, its tokenizer (a SentencePiece helper process) and LibTorch's
// grad mode are only ever touched from this thread.
class TranslationService::Worker {
 public:
  Worker(int id, const std::string& dir, const ServeConfig& cfg) : id_(id), dir_(dir), cfg_(cfg) {
    run_ = load_run(dir, cfg.checkpoint, cfg.device);
    name_ = fs::path(dir).lexically_normal().filename().string();
    if (name_.empty() || name_ == ".") name_ = fs::absolute(dir).lexically_normal().parent_path().filename().string();
    info_ = {{"model_id", id_},
             {"name", name_},
             {"loaded", true},
             {"checkpoint", fs::path(run_.checkpoint).filename().string()},  // names, not where they are on disk
             {"model", describe_model(run_.cfg.model)},
             {"attention", to_string(run_.cfg.model.attention.type)},
             {"has_attention", run_.model->decoder->has_attention()},
             {"self_attention",  // which stacks are self-attention layers (the page's explanation offers their layers)
              {{"encoder", run_.model->encoder->is_self_attention()}, {"decoder", run_.model->decoder->is_self_attention()}}},
             {"map", map_description(run_.cfg.model)},
             {"tokenizer", run_.cfg.data.tokenizer},
             {"subword", run_.tok.subword()},
             {"beam_size", run_.cfg.eval.beam_size},
             {"device", run_.device.str()}};
    const RunDir rd(dir);
    json test = nullptr;
    if (fs::is_regular_file(rd.eval_json("test"))) {
      try {
        EvalResult r = rd.read_eval("test");
        test = {{"bleu", r.bleu}, {"chrf", r.chrf}, {"beam_size", r.beam_size}, {"sentences", r.sentences}, {"by_length", json::array()}};
        for (const auto& b : r.by_length) test["by_length"].push_back({{"min", b.min}, {"max", b.max}, {"count", b.count}, {"bleu", b.bleu}});
      } catch (const std::exception& e) {
        spdlog::warn("{}: {} not shown: {}", dir, rd.eval_json("test"), e.what());
      }
    }
    info_["test"] = test;
    thread_ = std::thread([this] { loop(); });
  }
  ~Worker() {
    stop();
    if (thread_.joinable()) thread_.join();
  }

  int id() const { return id_; }
  const std::string& name() const { return name_; }
  const json& info() const { return info_; }
  LoadedRun& run() { return run_; }  // its config, vocabularies and tokenizer kind: read-only from other threads

  // Queues a job; RequestError (503) when stopping or when the queue is full.
  void submit(const std::shared_ptr<Job>& job) {
    std::lock_guard<std::mutex> g(m_);
    if (stopping_) throw RequestError{503, "the server is shutting down"};
    if (static_cast<int64_t>(job->lines.size()) > cfg_.limits.max_queue)  // not a busy queue: this never fits
      throw RequestError{413, std::to_string(job->lines.size()) + " sentences can never fit model " + std::to_string(id_) +
                                  "'s queue of " + std::to_string(cfg_.limits.max_queue) + " (--max-queue); send fewer"};
    if (queued_ + static_cast<int64_t>(job->lines.size()) > cfg_.limits.max_queue)
      throw RequestError{503, "model " + std::to_string(id_) + ": the queue is full (" + std::to_string(queued_) +
                             " sentences waiting, --max-queue " + std::to_string(cfg_.limits.max_queue) + "); retry later"};
    queued_ += static_cast<int64_t>(job->lines.size());
    q_.push_back(job);
    cv_.notify_one();
  }
  void stop() {
    std::lock_guard<std::mutex> g(m_);
    stopping_ = true;
    cv_.notify_all();
  }
  int64_t queued() const {
    std::lock_guard<std::mutex> g(m_);
    return queued_;
  }
  // Whether sentences other than the job's own wait in the queue.
  bool others_waiting(const Job& job) const {
    std::lock_guard<std::mutex> g(m_);
    return queued_ - (job.taken ? 0 : static_cast<int64_t>(job.lines.size())) > 0;
  }
  int64_t batches() const { return batches_.load(); }

 private:
  void loop() {
    std::shared_ptr<Job> task;
    for (;;) {
      std::vector<std::shared_ptr<Job>> group;
      {
        std::unique_lock<std::mutex> g(m_);
        cv_.wait(g, [&] { return !q_.empty() || stopping_; });
        if (q_.empty()) return;  // stopping, and everything queued was answered
        if (q_.front()->task) {  // alone, in its turn
          task = q_.front();
          task->taken = true;
          q_.pop_front();
          queued_ -= static_cast<int64_t>(task->lines.size());
        } else {
          take_group(group);
        }
      }
      if (task) {
        if (!task->abandoned) task->task(run_);
        task.reset();
        continue;
      }
      group.erase(std::remove_if(group.begin(), group.end(), [this](const std::shared_ptr<Job>& j) { return !admit(*j); }),
                  group.end());
      if (!group.empty()) decode(group);
    }
  }

  // Under m_: the oldest translation and every other waiting one with the same search, up to max_batch sentences, out
  // of the queue (abandoned ones dropped on the way; tasks stay for their turn).
  void take_group(std::vector<std::shared_ptr<Job>>& group) {
    int64_t n = 0;
    const JobOptions first = q_.front()->opt;
    for (auto it = q_.begin(); it != q_.end();) {
      const int64_t k = static_cast<int64_t>((*it)->lines.size());
      if ((*it)->abandoned) {
        queued_ -= k;
        it = q_.erase(it);
      } else if (!(*it)->task && (*it)->opt.same_search(first) && (group.empty() || n + k <= cfg_.max_batch)) {
        n += k;
        queued_ -= k;
        (*it)->taken = true;
        group.push_back(*it);
        it = q_.erase(it);
      } else {
        ++it;
      }
      if (n >= cfg_.max_batch) break;
    }
  }

  // What a job will cost, counted in what the model decodes: its sentences' tokens (or pieces) after tokenization,
  // times its beam. A job over a limit is answered 413 here, before any decoding, and leaves the group.
  bool admit(Job& job) {
    const ServeLimits& lim = cfg_.limits;
    int64_t cost = 0;
    job.tokens = Translator(run_, {}).tokenize(job.lines);
    for (size_t i = 0; i < job.tokens.size(); ++i) {
      const auto n = static_cast<int64_t>(job.tokens[i].size());
      if (n > lim.max_tokens) {
        refuse(job, 413, "sentence " + std::to_string(i + 1) + ": " + std::to_string(n) + " tokens after tokenization, over the limit of " +
                             std::to_string(lim.max_tokens) + " (--max-tokens)");
        return false;
      }
      cost += n * job.opt.beam;
    }
    if (cost > lim.max_cost) {
      refuse(job, 413, "the request's tokens times its beam size come to " + std::to_string(cost) + ", over the limit of " +
                           std::to_string(lim.max_cost) + " (--max-cost): send fewer sentences or a smaller beam");
      return false;
    }
    return true;
  }
  static void refuse(Job& job, int status, const std::string& message) {
    try {
      job.done.set_exception(std::make_exception_ptr(RequestError{status, message}));
    } catch (const std::future_error&) {
    }  // already answered
  }

  void decode(const std::vector<std::shared_ptr<Job>>& group) {
    std::vector<std::vector<std::string>> tokens;
    bool weights = false;
    for (const auto& j : group) {
      tokens.insert(tokens.end(), j->tokens.begin(), j->tokens.end());
      weights = weights || j->opt.weights;
    }
    try {
      SearchOptions so = search_options(run_.cfg.eval, group.front()->opt.beam);
      so.nbest = group.front()->opt.nbest;
      so.keep_weights = weights && run_.model->decoder->has_attention();
      // Every request of the group gave up (its deadline, its client, a shutdown): the model is freed at the next step.
      so.cancelled = [&group] {
        return std::all_of(group.begin(), group.end(), [](const std::shared_ptr<Job>& j) { return j->abandoned.load(); });
      };
      auto results = Translator(run_, so, cfg_.max_batch).nbest_tokens(tokens);
      batches_.fetch_add(1);
      size_t at = 0;
      for (const auto& j : group) {
        std::vector<std::vector<Translation>> mine(std::make_move_iterator(results.begin() + static_cast<std::ptrdiff_t>(at)),
                                                   std::make_move_iterator(results.begin() + static_cast<std::ptrdiff_t>(at + j->lines.size())));
        at += j->lines.size();
        j->done.set_value(std::move(mine));
      }
    } catch (...) {
      try {
        throw;
      } catch (const SearchCancelled&) {
        spdlog::info("model {}: decoding stopped: every request of its batch gave up (its deadline, its client or a shutdown)", id_);
      } catch (...) {
      }
      for (const auto& j : group) {
        try {
          j->done.set_exception(std::current_exception());  // SearchCancelled: nobody is waiting
        } catch (const std::future_error&) {
        }  // already answered
      }
    }
  }

  int id_;
  std::string dir_, name_;
  const ServeConfig& cfg_;
  LoadedRun run_;
  json info_;
  mutable std::mutex m_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> q_;
  int64_t queued_ = 0;
  bool stopping_ = false;
  std::atomic<int64_t> batches_{0};
  std::thread thread_;
};

namespace {

// Waits for a job's answer until it comes, the request's deadline passes, the service is cancelled, or its client has
// closed its connection while others wait for the model; in the last three the job is marked abandoned (the worker
// skips it, or stops its batch at the next decoder step when the whole batch gave up) and RequestError says why.
template <class T>
T await(TranslationService::Worker& w, Job& job, std::future<T>& answer, const ClientClosed& closed, const std::atomic<bool>& cancelled,
        double timeout_s, const char* what) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                            std::chrono::duration<double>(timeout_s));
  for (;;) {
    const auto left = until - std::chrono::steady_clock::now();
    if (answer.wait_for(std::min<std::chrono::steady_clock::duration>(left, std::chrono::milliseconds(20))) == std::future_status::ready)
      return answer.get();
    std::optional<RequestError> why;
    if (cancelled) {
      why = RequestError{503, "the server is shutting down"};
    } else if (closed && closed() && w.others_waiting(job)) {
      why = RequestError{503, "the client closed its connection while other requests waited for the model"};
    } else if (std::chrono::steady_clock::now() >= until) {
      why = RequestError{503, std::string("not ") + what + " within " + fmt::format("{:g}", timeout_s) + " s (--timeout); the server is overloaded"};
    }
    if (why) {
      job.abandoned = true;
      throw *why;
    }
  }
}

json attention_json(const Translation& t) {
  return {{"src", t.src_tokens}, {"tgt", t.tgt_tokens}, {"weights", token_weights(t)}};
}

}  // namespace

TranslationService::TranslationService(const ServeConfig& cfg) : cfg_(cfg) {
  if (cfg_.runs.empty()) throw UsageError("serve: give at least one --run DIR");
  for (size_t i = 0; i < cfg_.runs.size(); ++i) {
    workers_.push_back(std::make_unique<Worker>(kFirstModelId + static_cast<int>(i), cfg_.runs[i], cfg_));
    LoadedRun& run = workers_.back()->run();
    refs_.push_back({workers_.back()->id(), workers_.back()->name(), run.cfg.eval.beam_size, run.model->decoder->has_attention()});
    spdlog::info("model {}: {} ({})", workers_.back()->id(), cfg_.runs[i], workers_.back()->info()["model"].get<std::string>());
  }
}

TranslationService::~TranslationService() {
  stop();
  workers_.clear();  // each joins its thread after answering its queue
}

void TranslationService::stop() {
  for (auto& w : workers_) w->stop();
}

void TranslationService::cancel() {
  cancelled_ = true;
  stop();
}

json TranslationService::models() const {
  json out = json::array();
  for (const auto& w : workers_) out.push_back(w->info());
  return out;
}

ServeStats TranslationService::stats() const {
  ServeStats s;
  s.requests = requests_.load();
  s.sentences = sentences_.load();
  s.refused = refused_.load();
  for (const auto& w : workers_) s.batches += w->batches();
  return s;
}

json TranslationService::health() const {
  ServeStats s = stats();
  int64_t queued = 0;
  for (const auto& w : workers_) queued += w->queued();
  return {{"status", "ok"},       {"models", workers_.size()}, {"requests", s.requests}, {"sentences", s.sentences},
          {"batches", s.batches}, {"refused", s.refused},      {"queued", queued}};
}

ApiReply TranslationService::translate(const std::string& body, const ClientClosed& closed) {
  requests_.fetch_add(1);
  try {
    const TranslateRequest req = parse_translate_request(body, cfg_.limits, refs_);
    Worker* w = workers_[req.model].get();
    auto job = std::make_shared<Job>();
    job->opt = {req.beam, req.nbest, req.wants_weights()};
    job->lines = req.src;
    auto fut = job->done.get_future();
    w->submit(job);
    std::vector<std::vector<Translation>> results = await(*w, *job, fut, closed, cancelled_, cfg_.limits.timeout_s, "decoded");
    sentences_.fetch_add(static_cast<int64_t>(results.size()));
    // OpenNMT-py's shape: the outer list is the n-best rank, the inner one the inputs in order.
    LoadedRun& run = w->run();
    json out = json::array();
    for (int r = 0; r < req.nbest; ++r) out.push_back(json::array());
    for (size_t i = 0; i < results.size(); ++i) {
      for (int r = 0; r < req.nbest; ++r) {
        // A sentence with fewer finished hypotheses than asked repeats its last one, so that every rank lists every input.
        const Translation& t = results[i][std::min(static_cast<size_t>(r), results[i].size() - 1)];
        json h = {{"src", req.src[i]}, {"tgt", t.text}, {"n_best", req.nbest}, {"pred_score", t.score}, {"logprob", t.logprob}};
        if (req.wants_weights()) {
          const Translation words = word_level(run.tok, t);
          if (req.align) h["align"] = pharaoh(alignment_of(words));
          if (req.attention) {
            h["attention"] = attention_json(words);
            if (run.tok.subword()) h["attention_pieces"] = attention_json(t);
          }
        }
        if (req.ref[i]) {
          std::string ref = *req.ref[i];
          if (run.cfg.data.lowercase) ref = to_lower_utf8(ref);
          h["bleu"] = corpus_bleu({t.text}, {{ref}}).score;
        }
        out[static_cast<size_t>(r)].push_back(std::move(h));
      }
    }
    return {200, out};
  } catch (const RequestError& r) {
    refused_.fetch_add(1);
    return api_error(r.status, r.message);
  } catch (const std::exception& e) {
    refused_.fetch_add(1);
    spdlog::error("translate: {}", e.what());
    return api_error(500, std::string("internal error: ") + e.what());
  }
}

ApiReply TranslationService::explain(const std::string& body, const ClientClosed& closed) {
  requests_.fetch_add(1);
  try {
    const ExplainRequest req = parse_explain_request(body, cfg_.limits, refs_);
    Worker* w = workers_[req.model].get();
    auto job = std::make_shared<Job>();
    job->lines = {req.src};
    auto answer = std::make_shared<std::promise<ApiReply>>();
    auto fut = answer->get_future();
    const ServeLimits limits = cfg_.limits;
    job->task = [req, limits, answer](LoadedRun& run) {
      ApiReply reply;
      try {
        const std::vector<std::string> tokens = Translator(run, {}).tokenize({req.src}).at(0);
        if (static_cast<int64_t>(tokens.size()) > limits.max_tokens)
          throw RequestError{413, std::to_string(tokens.size()) + " tokens after tokenization, over the limit of " +
                                      std::to_string(limits.max_tokens) + " (--max-tokens)"};
        ExplainOptions o;
        o.step = req.step;
        o.beam = req.beam;
        o.part = req.part;
        o.layer = req.layer;
        reply = {200, explanation_json(explain_step(run, req.src, o))};
      } catch (const RequestError& r) {
        reply = api_error(r.status, r.message);
      } catch (const UsageError& e) {  // a step past the translation, a part or layer the model lacks
        reply = api_error(400, e.what());
      } catch (const std::exception& e) {
        spdlog::error("explain: {}", e.what());
        reply = api_error(500, std::string("internal error: ") + e.what());
      }
      answer->set_value(std::move(reply));
    };
    w->submit(job);
    ApiReply reply = await(*w, *job, fut, closed, cancelled_, cfg_.limits.timeout_s, "explained");
    if (reply.status != 200) refused_.fetch_add(1);
    return reply;
  } catch (const RequestError& r) {
    refused_.fetch_add(1);
    return api_error(r.status, r.message);
  }
}

}  // namespace attnmt
