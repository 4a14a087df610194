// The lab's experiment "explanation". Attention and explanation: attention weights against gradient and leave-one-out attributions.
#include "lab/lab_common.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "common/errors.h"
#include "common/host.h"
#include "common/progress.h"
#include "data/special_tokens.h"
#include "data/toy_corpus.h"
#include "eval/aer.h"
#include "eval/bleu.h"
#include "lab/measures.h"
#include "translate/alignment.h"
#include "translate/translator.h"

namespace attnmt::lab_detail {
using nlohmann::json;

namespace {

// Log-probabilities of each target token, forcing the reference, for several sources with the same target:
// [rows][T] (the <eos> step left out).
std::vector<std::vector<double>> forced_logprobs(Seq2Seq& model, const std::vector<std::vector<int64_t>>& srcs,
                                                 const std::vector<int64_t>& tgt, const torch::Device& device,
                                                 std::vector<std::vector<float>>* first_row_weights = nullptr) {
  torch::NoGradGuard ng;
  std::vector<EncodedPair> data;
  std::vector<int64_t> idx;
  for (size_t i = 0; i < srcs.size(); ++i) {
    data.push_back({srcs[i], tgt});
    idx.push_back(static_cast<int64_t>(i));
  }
  const Batch b = make_batch(data, idx).to(device);
  Seq2SeqOutput o = model->forward(b.src, b.src_len, b.src_mask, b.tgt_in);
  const HostTensor lp = to_host(torch::log_softmax(o.logits, -1).gather(2, b.tgt_out.unsqueeze(2)).squeeze(2), torch::kDouble);  // [N, T+1]
  const int64_t T = static_cast<int64_t>(tgt.size());
  std::vector<std::vector<double>> out(srcs.size());
  for (size_t i = 0; i < srcs.size(); ++i) out[i] = lp.values<double>(static_cast<int64_t>(i) * lp.size(1), static_cast<int64_t>(i) * lp.size(1) + T);
  if (first_row_weights && o.weights.defined()) {
    const HostTensor w = to_host(o.weights[0], torch::kFloat);  // [T+1, S]
    const int64_t S = static_cast<int64_t>(srcs[0].size());
    first_row_weights->clear();
    for (int64_t t = 0; t < T; ++t) first_row_weights->push_back(w.values<float>(t * w.size(1), t * w.size(1) + S));
  }
  return out;
}

std::vector<std::vector<float>> as_rows(const std::vector<std::vector<double>>& m) {
  std::vector<std::vector<float>> r;
  for (const auto& row : m) r.emplace_back(row.begin(), row.end());
  return r;
}

// |gradient x input| at the source embeddings for each target token of the forced reference TGT: [T][S], one backward
// pass per target token.
std::vector<std::vector<double>> gradient_saliency(LoadedRun& run, const std::vector<int64_t>& src,
                                                   const std::vector<int64_t>& tgt) {
  const int64_t T = static_cast<int64_t>(tgt.size());
  const Batch one = make_batch({{src, tgt}}, {0}).to(run.device);
  torch::Tensor emb;
  {
    torch::NoGradGuard ng;
    emb = run.model->encoder->embed_tokens(one.src)[0].detach();  // [S, E]
  }
  std::vector<std::vector<double>> sal(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) {
    auto f = [&](const torch::Tensor& x) {
      EncoderOutput enc = run.model->encoder->from_embeddings(x.unsqueeze(0), one.src_len, one.src_mask);
      Seq2SeqOutput o = run.model->decode(enc, one.tgt_in);
      return torch::log_softmax(o.logits[0][t], -1).index_select(0, one.tgt_out[0].narrow(0, t, 1)).squeeze(0);
    };
    std::vector<double> g = gradient_times_input(f, emb);
    for (double& v : g) v = std::fabs(v);
    sal[static_cast<size_t>(t)] = g;
  }
  return sal;
}

// Greedy decoding of every test sentence with the attention weights replaced by uniform and by permuted ones: BLEU and
// the share of content and function words that change, per replacement (and the table's rows; *NORMAL_BLEU: greedy
// BLEU with the model's own weights).
json counterfactual(LoadedRun& run, const TestSet& test, double* normal_bleu, std::vector<std::vector<std::string>>* rows) {
  SearchOptions greedy = search_options(run.cfg.eval, 1);
  AttentionImpl* mech = run.model->decoder->attention();
  json counter = json::array();
  std::vector<Translation> normal = Translator(run, greedy).best(test.src);
  std::vector<std::string> normal_text;
  for (const auto& t : normal) normal_text.push_back(t.text);
  *normal_bleu = corpus_bleu(normal_text, {test.ref}).score;
  for (const bool permute : {false, true}) {
    mech->edit_weights(permute ? AttentionImpl::WeightsEdit(PermutedWeights(1)) : AttentionImpl::WeightsEdit(uniform_weights));
    std::vector<Translation> alt = Translator(run, greedy).best(test.src);
    mech->edit_weights(nullptr);
    int64_t fn = 0, fn_changed = 0, cn = 0, cn_changed = 0;
    std::vector<std::string> alt_text;
    for (size_t i = 0; i < alt.size(); ++i) {
      alt_text.push_back(alt[i].text);
      const auto& a = normal[i].tgt_tokens;
      const auto& b = alt[i].tgt_tokens;
      for (size_t t = 0; t < a.size(); ++t) {
        const bool changed = t >= b.size() || b[t] != a[t];
        if (toy_content_word_fr(a[t])) {
          ++cn;
          cn_changed += changed;
        } else {
          ++fn;
          fn_changed += changed;
        }
      }
    }
    const std::string name = permute ? "permuted" : "uniform";
    const double b = corpus_bleu(alt_text, {test.ref}).score;
    const double fs_ = fn ? static_cast<double>(fn_changed) / static_cast<double>(fn) : 0.0;
    const double cs_ = cn ? static_cast<double>(cn_changed) / static_cast<double>(cn) : 0.0;
    counter.push_back({{"weights", name}, {"greedy_bleu", b}, {"function_tokens", fn}, {"function_changed", fn_changed},
                       {"function_changed_share", fs_}, {"content_tokens", cn}, {"content_changed", cn_changed},
                       {"content_changed_share", cs_}});
    rows->push_back({name, num(b), num(100 * fs_, 1) + "% of " + std::to_string(fn), num(100 * cs_, 1) + "% of " + std::to_string(cn)});
  }
  return counter;
}

}  // namespace

LabReport explanation(const LabOptions& opt) {
  LabReport rep;
  rep.name = "explanation";
  rep.title = "Attention and explanation: attention weights against gradient x input and leave-one-out";
  rep.claim = "attention weights are interpretable, but sometimes misleading as explanations (Jain & Wallace 2019; Serrano & "
              "Smith 2019); in NMT, attributions can align better than attention (Ding et al. 2019).";
  LabRun r = train_or_reuse(opt, "bahdanau", lab_config(opt, "bahdanau", "bahdanau.json", budget(opt.minutes, opt)));
  LoadedRun run = load_run(r.dir(), "best", opt.device);
  run.model->eval();
  const TestSet test = read_test_set(run.cfg);
  if (test.align.empty()) throw UsageError("lab explanation: the test set has no gold alignments (data.test.align)");
  const size_t n = std::min(test.src.size(), static_cast<size_t>(std::max(1, opt.explain_sentences)));
  AerCounts aer_att, aer_sal, aer_loo;
  int64_t tokens = 0, agree_att_sal = 0, agree_att_loo = 0, agree_sal_loo = 0;
  double tau_att_sal = 0, tau_att_loo = 0, tau_sal_loo = 0;
  int64_t tau_rows = 0;
  // Sentences evenly spaced in the length order of the test set, so that every length is read (the toy test set
  // cycles through its length buckets, so evenly spaced line numbers could all fall in one bucket).
  std::vector<size_t> by_length(test.src.size());
  for (size_t i = 0; i < by_length.size(); ++i) by_length[i] = i;
  std::stable_sort(by_length.begin(), by_length.end(),
                   [&](size_t a, size_t b) { return test.src_tok[a].size() < test.src_tok[b].size(); });
  ProgressLine progress("attributions", static_cast<int64_t>(n));
  for (size_t k = 0; k < n; ++k) {
    progress.update(static_cast<int64_t>(k));
    const size_t i = by_length[k * test.src.size() / n];
    const std::vector<int64_t> src = run.src_vocab.encode(test.src_tok[i]), tgt = run.tgt_vocab.encode(test.ref_tok[i]);
    const int64_t S = static_cast<int64_t>(src.size()), T = static_cast<int64_t>(tgt.size());
    if (S == 0 || T == 0) continue;
    // attention weights forcing the reference, and leave-one-out (every variant in one batched forward pass)
    std::vector<std::vector<float>> att;
    forced_logprobs(run.model, {src}, tgt, run.device, &att);
    const auto loo = leave_one_out([&](const std::vector<std::vector<int64_t>>& v) { return forced_logprobs(run.model, v, tgt, run.device); },
                                   src, kUnkId);
    const std::vector<std::vector<double>> sal = gradient_saliency(run, src, tgt);
    if (att.size() != static_cast<size_t>(T)) continue;  // an attention-free model has nothing to compare
    aer_att.add(aer_counts(hard_alignment(att), test.align[i]));
    aer_sal.add(aer_counts(hard_alignment(as_rows(sal)), test.align[i]));
    aer_loo.add(aer_counts(hard_alignment(as_rows(loo)), test.align[i]));
    for (int64_t t = 0; t < T; ++t) {
      const auto& a = att[static_cast<size_t>(t)];
      const std::vector<double> ad(a.begin(), a.end());
      const int64_t ia = argmax(ad), is = argmax(sal[static_cast<size_t>(t)]), il = argmax(loo[static_cast<size_t>(t)]);
      agree_att_sal += ia == is;
      agree_att_loo += ia == il;
      agree_sal_loo += is == il;
      ++tokens;
      if (S >= 2) {
        tau_att_sal += kendall_tau(ad, sal[static_cast<size_t>(t)]);
        tau_att_loo += kendall_tau(ad, loo[static_cast<size_t>(t)]);
        tau_sal_loo += kendall_tau(sal[static_cast<size_t>(t)], loo[static_cast<size_t>(t)]);
        ++tau_rows;
      }
    }
  }
  progress.update(static_cast<int64_t>(n));
  auto share = [&](int64_t c) { return tokens ? static_cast<double>(c) / static_cast<double>(tokens) : 0.0; };
  auto mean_tau = [&](double s) { return tau_rows ? s / static_cast<double>(tau_rows) : 0.0; };

  // Counterfactual decoding: the weights replaced by uniform and by permuted ones, greedy, every test sentence.
  double normal_bleu = 0;
  std::vector<std::vector<std::string>> crow;
  const json counter = counterfactual(run, test, &normal_bleu, &crow);
  rep.figures = {{"sentences", n},
                 {"target_tokens", tokens},
                 {"aer", {{"attention", aer_att.aer()}, {"gradient_x_input", aer_sal.aer()}, {"leave_one_out", aer_loo.aer()}}},
                 {"agreement", {{"attention_gradient", share(agree_att_sal)}, {"attention_loo", share(agree_att_loo)},
                                {"gradient_loo", share(agree_sal_loo)}}},
                 {"kendall_tau", {{"attention_gradient", mean_tau(tau_att_sal)}, {"attention_loo", mean_tau(tau_att_loo)},
                                  {"gradient_loo", mean_tau(tau_sal_loo)}}},
                 {"greedy_bleu", normal_bleu},
                 {"counterfactual", counter}};
  rep.table_html =
      html_table({"points at the source word by", "AER vs gold", "agrees with attention", "mean Kendall tau with attention"},
                 {{"attention weight", num(aer_att.aer(), 3), "-", "-"},
                  {"gradient x input", num(aer_sal.aer(), 3), num(100 * share(agree_att_sal), 1) + "%", num(mean_tau(tau_att_sal), 3)},
                  {"leave-one-out", num(aer_loo.aer(), 3), num(100 * share(agree_att_loo), 1) + "%", num(mean_tau(tau_att_loo), 3)}}) +
      "<h2>Counterfactual weights (greedy, every test sentence; original greedy BLEU " + num(normal_bleu) + ")</h2>" +
      html_table({"weights replaced by", "greedy BLEU", "function tokens changed", "content tokens changed"}, crow);
  std::ostringstream f;
  const double best_attr = std::min(aer_sal.aer(), aer_loo.aer());
  f << "Over " << tokens << " target tokens of " << n << " test sentences (forced decoding of the reference), attention points at a "
    << "source word with AER " << num(aer_att.aer(), 3) << " against the gold alignments, gradient x input with " << num(aer_sal.aer(), 3)
    << " and leave-one-out with " << num(aer_loo.aer(), 3) << ": "
    << (aer_att.aer() <= best_attr ? "attention aligns at least as well as either attribution here"
                                   : "an attribution aligns better than attention here")
    << ". Attention picks the same word as gradient x input for " << num(100 * share(agree_att_sal), 1) << "% of the tokens and as "
    << "leave-one-out for " << num(100 * share(agree_att_loo), 1) << "% (mean Kendall tau of the whole rows "
    << num(mean_tau(tau_att_sal), 2) << " and " << num(mean_tau(tau_att_loo), 2) << "). Replacing the weights by uniform ones drops "
    << "greedy BLEU from " << num(normal_bleu) << " to " << num(counter[0]["greedy_bleu"].get<double>()) << " and changes "
    << num(100 * counter[0]["content_changed_share"].get<double>(), 1) << "% of the content words and "
    << num(100 * counter[0]["function_changed_share"].get<double>(), 1) << "% of the function words; permuted weights: "
    << num(counter[1]["greedy_bleu"].get<double>()) << " BLEU, " << num(100 * counter[1]["content_changed_share"].get<double>(), 1)
    << "% and " << num(100 * counter[1]["function_changed_share"].get<double>(), 1) << "%.";
  rep.finding = f.str();
  return rep;
}

}  // namespace attnmt::lab_detail
