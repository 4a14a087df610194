#include "eval/evaluator.h"

#include <algorithm>
#include <chrono>

#include <spdlog/spdlog.h>

#include "common/errors.h"
#include "common/fs.h"
#include "data/text.h"
#include "eval/aer.h"
#include "eval/bleu.h"
#include "eval/chrf.h"
#include "run/run_dir.h"
#include "translate/alignment.h"
#include "translate/translator.h"

namespace attnmt {

EvalResult evaluate_sentences(LoadedRun& run, const std::vector<std::string>& srcs, const std::vector<std::string>& refs,
                              const std::vector<Alignment>* aligns, const SearchOptions& opt,
                              std::vector<std::string>* hyps_out) {
  if (srcs.size() != refs.size())
    throw UsageError("source has " + std::to_string(srcs.size()) + " lines, reference has " + std::to_string(refs.size()));
  EvalResult r;
  r.beam_size = opt.beam_size;
  r.length_penalty = opt.length_penalty;
  r.sentences = static_cast<int64_t>(srcs.size());
  auto t0 = std::chrono::steady_clock::now();
  std::vector<Translation> tr = Translator(run, opt).best(srcs);
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
      const auto w = word_level(run.tok, src_tok[i], ref_tok[i], forced[i]).weights;
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
  SearchOptions so = search_options(run.cfg.eval, req.beam, req.length_penalty);
  std::vector<std::string> hyps;
  EvalResult r = evaluate_sentences(run, srcs, refs, align.empty() ? nullptr : &aligns, so, &hyps);
  const RunDir dir(run_dir);
  dir.write_eval(name, r, hyps);
  spdlog::info("wrote {} and {}", dir.eval_hyp(name), dir.eval_json(name));
  return r;
}

}  // namespace attnmt
