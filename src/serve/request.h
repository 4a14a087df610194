// A translation request of `attnmt serve` read from its JSON body (OpenNMT-py's shape plus attnmt's options) and
// checked against the limits and the models served, before anything is queued. No LibTorch here: the fuzz target
// tests/fuzz/fuzz_request.cpp drives it with arbitrary bytes.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace attnmt {

struct ServeLimits {
  int64_t max_request_bytes = 1 << 20;  // a larger body is refused (413)
  int max_sentences = 64;               // sentences in one request (413 above)
  int max_words = 200;                  // whitespace-separated words in one sentence (400 above)
  int max_tokens = 256;                 // tokens (or subword pieces) of one sentence after tokenization (413 above)
  int64_t max_cost = 32768;             // a request's tokens times its beam size, summed over its sentences (413 above)
  int max_queue = 4096;                 // sentences waiting for one model (503 when full)
  double timeout_s = 60;                // a request not decoded by then is answered 503
  int max_beam = 32;                    // beam_size and n_best a request may ask for
};

// What the parser needs to know of a served model.
struct ModelRef {
  int id = 0;
  std::string name;      // the run directory's name: a request may use it as "id"
  int default_beam = 1;  // the run's eval.beam_size
  bool has_attention = true;
};

// A refusal the client can act on: its HTTP status (400, 404, 413 or 503) and one line.
struct RequestError {
  int status = 400;
  std::string message;
};

struct TranslateRequest {
  size_t model = 0;  // index into the models
  int beam = 1, nbest = 1;
  bool align = false;      // the hard alignment (only with attention)
  bool attention = false;  // the matrix with its tokens (only with attention)
  std::vector<std::string> src;
  std::vector<std::optional<std::string>> ref;  // one per sentence: sentence BLEU against it
  bool wants_weights() const { return align || attention; }
};

// Reads and checks a POST /translator/translate body; throws RequestError on anything wrong.
TranslateRequest parse_translate_request(const std::string& body, const ServeLimits& limits, const std::vector<ModelRef>& models);

// POST /translator/explain: one object {"src": "...", "id": N, "step": N, "part": "cross"|"encoder"|"decoder",
// "layer": N, "beam_size": N} (all but src optional): one attention step of the model's translation of src explained
// (translate/explain.h).
struct ExplainRequest {
  size_t model = 0;
  std::string src;
  int beam = 1;
  int step = 1;
  int layer = 0;  // 0: the last
  std::string part = "cross";
};
ExplainRequest parse_explain_request(const std::string& body, const ServeLimits& limits, const std::vector<ModelRef>& models);

}  // namespace attnmt
