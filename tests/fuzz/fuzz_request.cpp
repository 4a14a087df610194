// Fuzzes the request reader of `attnmt serve`: any body is either a request within the limits and the models, or a
// RequestError with a status the API documents (400, 404, 413) whose JSON form can always be written.
#include <nlohmann/json.hpp>

#include "data/text.h"
#include "fuzz_common.h"
#include "serve/request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace attnmt;
  const std::string body(reinterpret_cast<const char*>(data), size);
  ServeLimits limits;
  limits.max_request_bytes = 4096;
  limits.max_sentences = 8;
  limits.max_words = 20;
  limits.max_beam = 8;
  const std::vector<ModelRef> models = {{100, "bahdanau", 5, true}, {101, "none", 1, false}};
  try {
    TranslateRequest r = parse_translate_request(body, limits, models);
    fuzz::check(!r.src.empty() && r.src.size() <= 8, "1..max_sentences sentences");
    fuzz::check(r.ref.size() == r.src.size(), "one ref slot per sentence");
    fuzz::check(r.model < models.size(), "a served model");
    fuzz::check(r.beam >= 1 && r.beam <= 8 && r.nbest >= 1 && r.nbest <= r.beam, "1 <= n_best <= beam <= max_beam");
    fuzz::check(models[r.model].has_attention || !r.wants_weights(), "no weights asked of a model without attention");
    for (const auto& s : r.src) fuzz::check(find_invalid_utf8(s) == std::string::npos, "sentences are UTF-8");
  } catch (const RequestError& e) {
    fuzz::check(e.status == 400 || e.status == 404 || e.status == 413, "a documented status");
    fuzz::check(!e.message.empty(), "a message");
    const nlohmann::json j = {{"status", "error"}, {"error", e.message}};
    fuzz::check(!j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).empty(), "the error can be written");
  }
  return 0;
}
