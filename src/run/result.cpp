#include "run/result.h"

namespace attnmt {

nlohmann::json EvalResult::to_json() const {
  nlohmann::json j = {{"bleu", bleu},           {"bleu_lc", bleu_lc},   {"chrf", chrf},
                      {"unk_rate", unk_rate},   {"signature", signature},
                      {"chrf_signature", chrf_signature},           {"bleu_line", bleu_line},
                      {"beam_size", beam_size}, {"length_penalty", length_penalty}, {"sentences", sentences}, {"decode_s", decode_s},
                      {"sentences_per_s", sentences_per_s}};
  j["by_length"] = nlohmann::json::array();
  for (const auto& b : by_length)
    j["by_length"].push_back({{"min", b.min}, {"max", b.max < 0 ? nlohmann::json(nullptr) : nlohmann::json(b.max)},
                              {"count", b.count}, {"bleu", b.bleu}});
  if (ppl) j["ppl"] = *ppl;
  if (aer) j["aer"] = *aer;
  if (attention_entropy) j["attention_entropy"] = *attention_entropy;
  return j;
}

EvalResult EvalResult::from_json(const nlohmann::json& j) {
  EvalResult r;
  r.bleu = j.at("bleu").get<double>();
  r.chrf = j.value("chrf", 0.0);
  r.bleu_lc = j.value("bleu_lc", 0.0);  // absent from evaluations written before it existed
  r.unk_rate = j.value("unk_rate", 0.0);
  r.signature = j.value("signature", "");
  r.chrf_signature = j.value("chrf_signature", "");
  r.bleu_line = j.value("bleu_line", "");
  r.beam_size = j.value("beam_size", 1);
  r.length_penalty = j.value("length_penalty", 0.0);
  r.sentences = j.value("sentences", int64_t{0});
  r.decode_s = j.value("decode_s", 0.0);
  r.sentences_per_s = j.value("sentences_per_s", 0.0);
  for (const auto& b : j.at("by_length"))
    r.by_length.push_back({b.at("min").get<int>(), b.at("max").is_null() ? -1 : b.at("max").get<int>(),
                           b.at("count").get<int64_t>(), b.at("bleu").get<double>()});
  if (j.contains("aer")) r.aer = j["aer"].get<double>();
  if (j.contains("attention_entropy")) r.attention_entropy = j["attention_entropy"].get<double>();
  if (j.contains("ppl")) r.ppl = j["ppl"].get<double>();
  return r;
}

std::vector<BucketScore> make_buckets(const std::vector<int>& edges) {
  std::vector<BucketScore> b;
  int lo = 1;
  for (int e : edges) {
    b.push_back({lo, e, 0, 0.0});
    lo = e + 1;
  }
  b.push_back({lo, -1, 0, 0.0});
  return b;
}

}  // namespace attnmt
