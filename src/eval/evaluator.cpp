#include "eval/evaluator.h"

#include "common/host.h"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <numeric>

#include <spdlog/spdlog.h>

#include "common/errors.h"
#include "common/fs.h"
#include "common/progress.h"
#include "common/runtime.h"
#include "data/batcher.h"
#include "eval/alignment.h"
#include "eval/bleu.h"
#include "eval/chrf.h"
#include "eval/run_dir.h"
#include "model/checkpoint.h"
#include "model/loss.h"

namespace attnmt {

namespace fs = std::filesystem;

LoadedRun load_run(const std::string& run_dir, const std::string& which, const std::string& device_spec) {
  if (!fs::is_directory(run_dir)) throw UsageError(run_dir + ": run directory not found");
  const RunDir dir(run_dir);
  for (const auto& f : dir.required_files())
    if (!fs::is_regular_file(f)) throw UsageError(run_dir + ": missing " + fs::path(f).filename().string() + " (not a training run?)");
  LoadedRun r;
  try {
    r.cfg = config_from_json(read_json_file(dir.config()));
  } catch (const UsageError& e) {
    throw UsageError(dir.config() + ": " + e.what());
  }
  r.src_vocab = Vocab::load(dir.src_vocab());
  r.tgt_vocab = Vocab::load(dir.tgt_vocab());
  r.tok = Tokenizer::from_config(r.cfg.data, dir.src_spm(), dir.tgt_spm());
  r.device = resolve_device(device_spec.empty() ? r.cfg.device : device_spec);
  r.model = Seq2Seq(r.cfg.model, r.src_vocab.size(), r.tgt_vocab.size());
  if (which == "best" || which == "last") {
    r.checkpoint = dir.checkpoint(which);
  } else if (fs::is_regular_file(which)) {
    r.checkpoint = which;
  } else {
    throw UsageError("--checkpoint: '" + which + "' is neither best, last nor a checkpoint file");
  }
  load_checkpoint(r.checkpoint, r.model, nullptr);
  r.model->to(r.device);
  r.model->eval();
  return r;
}

std::vector<std::vector<Translation>> translate_lines_nbest(LoadedRun& run, const std::vector<std::string>& lines,
                                                            const SearchOptions& opt, int batch_size) {
  std::vector<std::vector<Translation>> out(lines.size(), std::vector<Translation>(1));
  std::vector<std::vector<int64_t>> ids(lines.size());
  std::vector<int64_t> order;
  for (size_t i = 0; i < lines.size(); ++i) {
    out[i][0].src_tokens = run.tok.encode(lines[i], Side::kSource);
    if (out[i][0].src_tokens.empty()) continue;
    if (static_cast<int>(out[i][0].src_tokens.size()) > run.cfg.data.max_len)
      spdlog::warn("line {}: {} tokens, longer than the training limit of {}; translating anyway", i + 1,
                   out[i][0].src_tokens.size(), run.cfg.data.max_len);
    ids[i] = run.src_vocab.encode(out[i][0].src_tokens);
    order.push_back(static_cast<int64_t>(i));
  }
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return ids[static_cast<size_t>(a)].size() < ids[static_cast<size_t>(b)].size();
  });
  ProgressLine progress("translating", static_cast<int64_t>(order.size()));
  for (size_t start = 0; start < order.size(); start += static_cast<size_t>(batch_size)) {
    progress.update(static_cast<int64_t>(start));
    std::vector<int64_t> idx(order.begin() + static_cast<std::ptrdiff_t>(start),
                             order.begin() + static_cast<std::ptrdiff_t>(std::min(order.size(), start + static_cast<size_t>(batch_size))));
    Batch b = make_src_batch(ids, idx);
    std::vector<std::vector<Hypothesis>> hs;
    if (opt.beam_size <= 1) {  // greedy
      for (auto& h : greedy_search(run.model, b, opt, run.device)) hs.push_back({std::move(h)});
    } else {
      hs = beam_search(run.model, b, opt, run.device);
    }
    for (size_t k = 0; k < idx.size(); ++k) {
      std::vector<Translation>& ts = out[static_cast<size_t>(idx[k])];
      const std::vector<std::string> src_tokens = ts[0].src_tokens;
      if (hs[k].empty()) continue;  // nothing finished: one empty translation
      ts.assign(hs[k].size(), Translation{});
      for (size_t n = 0; n < hs[k].size(); ++n) {
        Translation& t = ts[n];
        t.src_tokens = src_tokens;
        t.tgt_tokens = run.tgt_vocab.decode(hs[k][n].tokens);
        t.text = run.tok.decode(t.tgt_tokens, Side::kTarget);
        t.weights = std::move(hs[k][n].weights);
        t.score = hs[k][n].score;
        t.logprob = hs[k][n].logprob;
      }
    }
  }
  return out;
}

std::vector<std::vector<float>> token_weights(const Translation& t) {
  const size_t n = std::min(t.weights.size(), t.tgt_tokens.size());
  return {t.weights.begin(), t.weights.begin() + static_cast<std::ptrdiff_t>(n)};
}

Translation word_level(const LoadedRun& run, const Translation& t) {
  if (!run.tok.subword()) return t;
  Translation w = t;
  w.src_tokens = run.tok.join_words(t.src_tokens);
  w.tgt_tokens = run.tok.join_words(t.tgt_tokens);
  if (!t.weights.empty()) w.weights = word_level_map(t.weights, run.tok.word_index(t.src_tokens), run.tok.word_index(t.tgt_tokens));
  return w;
}

std::vector<Translation> translate_lines(LoadedRun& run, const std::vector<std::string>& lines,
                                         const SearchOptions& opt, int batch_size) {
  SearchOptions one = opt;
  one.nbest = 1;
  std::vector<Translation> out;
  out.reserve(lines.size());
  for (auto& ts : translate_lines_nbest(run, lines, one, batch_size)) out.push_back(std::move(ts[0]));
  return out;
}

std::vector<std::vector<std::vector<float>>> forced_attention(LoadedRun& run, const std::vector<std::vector<std::string>>& src,
                                                              const std::vector<std::vector<std::string>>& tgt,
                                                              std::vector<torch::Tensor>* head_weights, double* ppl,
                                                              std::vector<SelfAttentionMaps>* self_maps) {
  TORCH_CHECK(src.size() == tgt.size(), "forced_attention: ", src.size(), " sources vs ", tgt.size(), " targets");
  torch::NoGradGuard ng;
  std::vector<std::vector<std::vector<float>>> out(src.size());
  if (head_weights) head_weights->assign(src.size(), torch::Tensor());
  if (self_maps) self_maps->assign(src.size(), SelfAttentionMaps());
  std::vector<EncodedPair> data(src.size());
  std::vector<int64_t> order;
  for (size_t i = 0; i < src.size(); ++i) {
    data[i] = {run.src_vocab.encode(src[i]), run.tgt_vocab.encode(tgt[i])};
    if (!src[i].empty()) order.push_back(static_cast<int64_t>(i));
  }
  double loss = 0;
  int64_t tokens = 0;
  const size_t bs = static_cast<size_t>(run.cfg.eval.batch_size);
  ProgressLine progress("forcing references", static_cast<int64_t>(order.size()));
  for (size_t start = 0; start < order.size(); start += bs) {
    progress.update(static_cast<int64_t>(start));
    std::vector<int64_t> idx(order.begin() + static_cast<std::ptrdiff_t>(start),
                             order.begin() + static_cast<std::ptrdiff_t>(std::min(order.size(), start + bs)));
    Batch b = make_batch(data, idx);
    Batch d = b.to(run.device);
    const BatchLoss bl = batch_loss(run.model, d, 0.0);
    const Seq2SeqOutput& o = bl.out;
    loss += host_scalar<double>(bl.sum);
    tokens += b.tgt_tokens;
    if (self_maps) {
      for (size_t k = 0; k < idx.size(); ++k) {
        const size_t i = static_cast<size_t>(idx[k]);
        const int64_t S = static_cast<int64_t>(src[i].size()), T = static_cast<int64_t>(tgt[i].size());
        for (const auto& w : o.encoder_self_weights)
          (*self_maps)[i].encoder.push_back(to_host(w[static_cast<int64_t>(k)].slice(1, 0, S).slice(2, 0, S), torch::kFloat).tensor());
        for (const auto& w : o.decoder_self_weights)
          (*self_maps)[i].decoder.push_back(
              to_host(w[static_cast<int64_t>(k)].slice(1, 0, T + 1).slice(2, 0, T + 1), torch::kFloat).tensor());  // <eos> step too
      }
    }
    if (!o.weights.defined()) continue;
    const HostTensor w = to_host(o.weights, torch::kFloat);  // [B, T, S]
    torch::Tensor hw = o.head_weights.defined() ? to_host(o.head_weights, torch::kFloat).tensor() : torch::Tensor();
    for (size_t k = 0; k < idx.size(); ++k) {
      size_t i = static_cast<size_t>(idx[k]);
      int64_t T = static_cast<int64_t>(tgt[i].size()), S = static_cast<int64_t>(src[i].size());
      for (int64_t j = 0; j < T; ++j) {
        const int64_t at = (static_cast<int64_t>(k) * w.size(1) + j) * w.size(2);
        out[i].push_back(w.values<float>(at, at + S));
      }
      if (head_weights && hw.defined())
        (*head_weights)[i] = hw[static_cast<int64_t>(k)].slice(1, 0, T).slice(2, 0, S).clone();  // [h, T, S]
    }
  }
  if (ppl) *ppl = tokens ? std::exp(std::min(100.0, loss / static_cast<double>(tokens))) : 0.0;
  return out;
}

EvalResult evaluate_sentences(LoadedRun& run, const std::vector<std::string>& srcs, const std::vector<std::string>& refs,
                              const std::vector<Alignment>* aligns, const SearchOptions& opt,
                              std::vector<std::string>* hyps_out) {
  if (srcs.size() != refs.size())
    throw UsageError("source has " + std::to_string(srcs.size()) + " lines, reference has " + std::to_string(refs.size()));
  EvalResult r;
  r.beam_size = opt.beam_size;
  r.sentences = static_cast<int64_t>(srcs.size());
  auto t0 = std::chrono::steady_clock::now();
  std::vector<Translation> tr = translate_lines(run, srcs, opt, run.cfg.eval.batch_size);
  r.decode_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.sentences_per_s = r.decode_s > 0 ? static_cast<double>(r.sentences) / r.decode_s : 0.0;
  std::vector<std::string> hyps(tr.size()), refs_cmp(refs.size());
  for (size_t i = 0; i < tr.size(); ++i) {
    hyps[i] = tr[i].text;
    refs_cmp[i] = run.cfg.data.lowercase ? to_lower_utf8(refs[i]) : refs[i];
  }
  BleuScore bleu = corpus_bleu(hyps, {refs_cmp});
  r.bleu = bleu.score;
  r.signature = bleu.signature;
  r.bleu_line = bleu.format();
  BleuOptions lc;
  lc.lowercase = true;
  r.bleu_lc = corpus_bleu(hyps, {refs_cmp}, lc).score;
  int64_t hyp_tokens = 0, unk_tokens = 0;
  for (const auto& t : tr) {
    hyp_tokens += static_cast<int64_t>(t.tgt_tokens.size());
    unk_tokens += std::count(t.tgt_tokens.begin(), t.tgt_tokens.end(), std::string("<unk>"));
  }
  r.unk_rate = hyp_tokens ? static_cast<double>(unk_tokens) / static_cast<double>(hyp_tokens) : 0.0;
  ChrfScore chrf = corpus_chrf(hyps, {refs_cmp});
  r.chrf = chrf.score;
  r.chrf_signature = chrf.signature;
  r.by_length = make_buckets(run.cfg.eval.buckets);
  std::vector<std::vector<size_t>> members(r.by_length.size());
  for (size_t i = 0; i < tr.size(); ++i) {
    const int len = static_cast<int>(run.tok.words(srcs[i]).size());  // words, also for a subword run
    for (size_t k = 0; k < r.by_length.size(); ++k)
      if (len <= r.by_length[k].max || r.by_length[k].max < 0) {
        members[k].push_back(i);
        break;
      }
  }
  for (size_t k = 0; k < r.by_length.size(); ++k) {
    std::vector<std::string> h, f;
    for (size_t i : members[k]) {
      h.push_back(hyps[i]);
      f.push_back(refs_cmp[i]);
    }
    r.by_length[k].count = static_cast<int64_t>(h.size());
    r.by_length[k].bleu = h.empty() ? 0.0 : corpus_bleu(h, {f}).score;
  }
  if (r.by_length.back().count == 0) r.by_length.pop_back();  // the open-ended bucket only when used

  std::vector<std::vector<std::string>> src_tok(srcs.size()), ref_tok(refs.size());
  for (size_t i = 0; i < srcs.size(); ++i) {
    src_tok[i] = tr[i].src_tokens;
    ref_tok[i] = run.tok.encode(refs[i], Side::kTarget);
  }
  double ppl = 0;
  auto forced = forced_attention(run, src_tok, ref_tok, nullptr, &ppl);
  r.ppl = ppl;
  if (aligns && run.model->decoder->has_attention()) {
    if (aligns->size() != srcs.size())
      throw UsageError("alignments have " + std::to_string(aligns->size()) + " lines, the test set has " +
                       std::to_string(srcs.size()));
    AerCounts total;
    double ent = 0;
    int64_t rows = 0;
    for (size_t i = 0; i < forced.size(); ++i) {
      // gold alignments are between words: a subword run's map is summed into words first
      const auto w = run.tok.subword() ? word_level_map(forced[i], run.tok.word_index(src_tok[i]), run.tok.word_index(ref_tok[i]))
                                       : forced[i];
      total.add(aer_counts(hard_alignment(w), (*aligns)[i]));
      ent += mean_entropy(w) * static_cast<double>(w.size());
      rows += static_cast<int64_t>(w.size());
    }
    r.aer = total.aer();
    r.attention_entropy = rows ? ent / static_cast<double>(rows) : 0.0;
  }
  if (hyps_out) *hyps_out = std::move(hyps);
  return r;
}

EvalResult evaluate_run(LoadedRun& run, const std::string& run_dir, const EvalRequest& req) {
  std::string src = req.src, ref = req.ref, align = req.align;
  const std::string name = req.src.empty() ? req.split : "custom";
  if (src.empty()) {
    if (req.split != "test" && req.split != "valid") throw UsageError("--split: unknown value '" + req.split + "'. Valid options: test, valid");
    const SplitConfig& s = req.split == "test" ? run.cfg.data.test : run.cfg.data.valid;
    if (!s.tsv.empty()) throw UsageError(config_key(run.cfg, &s.tsv) + ": evaluation reads src/tgt files; pass --src and --ref");
    if (s.src.empty()) throw UsageError(config_split_path(run.cfg, s) + ": the run's config names no files; pass --src and --ref");
    src = s.src;
    ref = s.tgt;
    if (align.empty()) align = s.align;
  }
  std::vector<std::string> srcs = read_lines(src), refs = read_lines(ref);
  check_same_line_count(src, srcs.size(), ref, refs.size());
  std::vector<Alignment> aligns;
  if (!align.empty()) {
    std::vector<size_t> sl, tl;
    for (size_t i = 0; i < srcs.size(); ++i) {
      sl.push_back(run.tok.words(srcs[i]).size());
      tl.push_back(run.tok.words(refs[i]).size());
    }
    aligns = read_alignments(align, &sl, &tl);
  }
  SearchOptions so = search_options(run.cfg.eval, req.beam);
  std::vector<std::string> hyps;
  EvalResult r = evaluate_sentences(run, srcs, refs, align.empty() ? nullptr : &aligns, so, &hyps);
  const RunDir dir(run_dir);
  dir.write_eval(name, r, hyps);
  spdlog::info("wrote {} and {}", dir.eval_hyp(name), dir.eval_json(name));
  return r;
}

}  // namespace attnmt
