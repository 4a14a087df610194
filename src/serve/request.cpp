#include "serve/request.h"

#include <algorithm>
#include <array>

#include <nlohmann/json.hpp>

#include "data/text.h"

namespace attnmt {

using nlohmann::json;

namespace {

const std::vector<std::string> kKnownKeys = {"src", "id", "beam_size", "n_best", "align", "attention", "ref"};

std::string item(size_t i) { return "item " + std::to_string(i); }

int count_words(const std::string& s) {
  int n = 0;
  bool in = false;
  for (char c : s) {
    const bool space = c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
    if (!space && !in) ++n;
    in = !space;
  }
  return n;
}

// An optional integer option of a request item within [lo, hi].
int int_option(const json& it, const char* key, int dflt, int lo, int hi) {
  if (!it.contains(key)) return dflt;
  const json& v = it[key];
  if (!v.is_number_integer()) throw RequestError{400, std::string("\"") + key + "\" must be an integer"};
  const bool negative = v.is_number_integer() && !v.is_number_unsigned() && v.get<int64_t>() < 0;
  const uint64_t mag = negative ? 0 : v.get<uint64_t>();
  if (negative || mag < static_cast<uint64_t>(lo) || mag > static_cast<uint64_t>(hi))
    throw RequestError{400, std::string("\"") + key + "\" " + v.dump() + " is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]"};
  return static_cast<int>(mag);
}

bool bool_option(const json& it, const char* key, bool dflt) {
  if (!it.contains(key)) return dflt;
  if (!it[key].is_boolean()) throw RequestError{400, std::string("\"") + key + "\" must be true or false"};
  return it[key].get<bool>();
}

// The body as a JSON list of items, within the sentence limit.
json parse_body(const std::string& body, const ServeLimits& limits) {
  json req;
  try {
    req = json::parse(body);
  } catch (const json::exception& e) {  // parse_error, and out_of_range for a number too large for a double
    throw RequestError{400, std::string("malformed JSON: ") + e.what()};
  }
  if (!req.is_array()) throw RequestError{400, "the request must be a JSON list of {\"src\": \"...\", \"id\": N} objects"};
  if (req.empty()) throw RequestError{400, "the request is empty: give at least one {\"src\": \"...\"}"};
  if (static_cast<int64_t>(req.size()) > limits.max_sentences)
    throw RequestError{413, "the request has " + std::to_string(req.size()) + " sentences, over the limit of " +
                                std::to_string(limits.max_sentences) + " (--max-sentences)"};
  return req;
}

// Checks each item's keys and returns the model "id" they all name (null: none, the first model).
json shared_model_id(const json& req) {
  json id = nullptr;
  for (size_t i = 0; i < req.size(); ++i) {
    const json& it = req[i];
    if (!it.is_object()) throw RequestError{400, item(i) + " is not an object"};
    if (!it.contains("src") || !it["src"].is_string()) throw RequestError{400, item(i) + " has no \"src\" string"};
    for (const auto& [k, v] : it.items())
      if (std::find(kKnownKeys.begin(), kKnownKeys.end(), k) == kKnownKeys.end())
        throw RequestError{400, item(i) + ": unknown key \"" + k + "\" (known: src, id, beam_size, n_best, align, attention, ref)"};
    if (it.contains("ref") && !it["ref"].is_string()) throw RequestError{400, item(i) + ": \"ref\" must be a string"};
    const json this_id = it.contains("id") ? it["id"] : json(nullptr);
    if (i == 0) id = this_id;
    else if (this_id != id)
      throw RequestError{400, "all items of one request must name the same model \"id\" (item 0: " + id.dump() + ", " + item(i) + ": " + this_id.dump() + ")"};
  }
  return id;
}

// The index in MODELS of the model ID names (an integer id or a run's name); 0 for null.
size_t find_model(const json& id, const std::vector<ModelRef>& models) {
  if (id.is_null()) return 0;
  if (!id.is_number_integer() && !id.is_string()) throw RequestError{400, "\"id\" must be a model id (an integer) or a run's name"};
  for (size_t m = 0; m < models.size(); ++m) {
    const bool found = id.is_string() ? id.get<std::string>() == models[m].name
                                      : (id.is_number_unsigned() || id.get<int64_t>() >= 0) && id.get<uint64_t>() == static_cast<uint64_t>(models[m].id);
    if (found) return m;
  }
  throw RequestError{404, "no model with id " + id.dump() + " (GET /models lists them)"};
}

// The search options: the first item's; the others must not ask for a different search.
void read_search_options(const json& req, const ModelRef& model, const ServeLimits& limits, TranslateRequest& r) {
  const json& first = req[0];
  r.beam = int_option(first, "beam_size", std::min(model.default_beam, limits.max_beam), 1, limits.max_beam);
  r.nbest = int_option(first, "n_best", 1, 1, r.beam);
  const bool align = bool_option(first, "align", model.has_attention);
  const bool attention = bool_option(first, "attention", false);
  if ((align || attention) && !model.has_attention)
    throw RequestError{400, "model " + std::to_string(model.id) + " (attention none) has no attention weights: leave out \"align\" and \"attention\""};
  r.align = align;
  r.attention = attention;
  for (size_t i = 1; i < req.size(); ++i) {
    if (int_option(req[i], "beam_size", r.beam, 1, limits.max_beam) != r.beam || int_option(req[i], "n_best", r.nbest, 1, limits.max_beam) != r.nbest ||
        bool_option(req[i], "align", align) != align || bool_option(req[i], "attention", attention) != attention)
      throw RequestError{400, item(i) + " asks for other options than item 0: one request, one set of beam_size, n_best, align, attention"};
  }
}

// Each item's source (valid UTF-8, within the word limit) and optional reference.
void read_sentences(const json& req, const ServeLimits& limits, TranslateRequest& r) {
  for (size_t i = 0; i < req.size(); ++i) {
    std::string src = req[i]["src"].get<std::string>();
    if (find_invalid_utf8(src) != std::string::npos) throw RequestError{400, item(i) + ": \"src\" is not valid UTF-8"};
    if (src.find('\0') != std::string::npos) throw RequestError{400, item(i) + ": \"src\" contains a NUL character"};
    const int words = count_words(src);
    if (words > limits.max_words)
      throw RequestError{400, item(i) + ": " + std::to_string(words) + " words, over the limit of " + std::to_string(limits.max_words) + " (--max-words)"};
    r.src.push_back(std::move(src));
    r.ref.push_back(req[i].contains("ref") ? std::optional<std::string>(req[i]["ref"].get<std::string>()) : std::nullopt);
  }
}

}  // namespace

ExplainRequest parse_explain_request(const std::string& body, const ServeLimits& limits, const std::vector<ModelRef>& models) {
  if (static_cast<int64_t>(body.size()) > limits.max_request_bytes)
    throw RequestError{413, "the request has " + std::to_string(body.size()) + " bytes, over the limit of " +
                                std::to_string(limits.max_request_bytes) + " (--max-request-bytes)"};
  if (models.empty()) throw RequestError{503, "no model is loaded"};
  json it;
  try {
    it = json::parse(body);
  } catch (const json::exception& e) {
    throw RequestError{400, std::string("malformed JSON: ") + e.what()};
  }
  if (!it.is_object() || !it.contains("src") || !it["src"].is_string())
    throw RequestError{400, "the request must be one JSON object {\"src\": \"...\", \"id\": N, \"step\": N}"};
  static const std::array<const char*, 6> known = {"src", "id", "step", "part", "layer", "beam_size"};
  for (const auto& [k, v] : it.items())
    if (std::find_if(known.begin(), known.end(), [&k = k](const char* n) { return k == n; }) == known.end())
      throw RequestError{400, "unknown key \"" + k + "\" (known: src, id, step, part, layer, beam_size)"};
  ExplainRequest r;
  r.model = find_model(it.contains("id") ? it["id"] : json(nullptr), models);
  const ModelRef& model = models[r.model];
  if (!model.has_attention) throw RequestError{400, "model " + std::to_string(model.id) + " (attention none) has no attention to explain"};
  r.beam = int_option(it, "beam_size", std::min(model.default_beam, limits.max_beam), 1, limits.max_beam);
  r.step = int_option(it, "step", 1, 1, limits.max_tokens + 1);
  r.layer = int_option(it, "layer", 0, 0, 64);
  if (it.contains("part")) {
    if (!it["part"].is_string()) throw RequestError{400, "\"part\" must be a string: cross, encoder or decoder"};
    r.part = it["part"].get<std::string>();
    if (r.part != "cross" && r.part != "encoder" && r.part != "decoder")
      throw RequestError{400, "\"part\" must be cross, encoder or decoder"};
  }
  TranslateRequest one;
  read_sentences(json::array({json{{"src", it["src"]}}}), limits, one);
  r.src = one.src.at(0);
  if (count_words(r.src) == 0) throw RequestError{400, "\"src\" is empty"};
  return r;
}

TranslateRequest parse_translate_request(const std::string& body, const ServeLimits& limits, const std::vector<ModelRef>& models) {
  if (static_cast<int64_t>(body.size()) > limits.max_request_bytes)
    throw RequestError{413, "the request has " + std::to_string(body.size()) + " bytes, over the limit of " +
                                std::to_string(limits.max_request_bytes) + " (--max-request-bytes)"};
  if (models.empty()) throw RequestError{503, "no model is loaded"};
  const json req = parse_body(body, limits);
  TranslateRequest r;
  r.model = find_model(shared_model_id(req), models);
  read_search_options(req, models[r.model], limits, r);
  read_sentences(req, limits, r);
  return r;
}

}  // namespace attnmt
