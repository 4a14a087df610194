// The lab's experiment "masks". Padding masks: what attention does to padding without them.
#include "lab/lab_common.h"

#include <algorithm>
#include <sstream>


#include "eval/bleu.h"
#include "translate/translator.h"

namespace attnmt::lab_detail {
using nlohmann::json;

LabReport masks(const LabOptions& opt) {
  LabReport rep;
  rep.name = "masks";
  rep.title = "Padding masks: what padding does to a translation when the mask is off";
  rep.claim = "masks keep padding out of attention; without them a sentence's translation depends on what it is batched with.";
  const TestSet test = read_test_set(lab_config(opt, "bahdanau", "bahdanau.json", budget(opt.minutes, opt)));
  json runs = json::array();
  std::vector<std::vector<std::string>> rows;
  for (bool mask : {true, false}) {
    const std::string name = mask ? "bahdanau" : "bahdanau_unmasked";
    LabRun r = train_or_reuse(opt, name, lab_config(opt, name, "bahdanau.json",
                                                    budget(opt.minutes, opt, {[mask](Config& c) { c.model.attention.mask = mask; }})));
    const EvalResult e = test_eval(r, 5);
    LoadedRun run = load_run(r.dir(), "best", opt.device);
    SearchOptions greedy = search_options(run.cfg.eval, 1);
    const auto alone = Translator(run, greedy, 1).best(test.src);
    const auto together = Translator(run, greedy, static_cast<int>(test.src.size())).best(test.src);
    int64_t changed = 0, changed_short = 0, short_count = 0;
    std::vector<std::string> ha, ht;
    const size_t longest = [&] {
      size_t m = 0;
      for (const auto& s : test.src_tok) m = std::max(m, s.size());
      return m;
    }();
    for (size_t i = 0; i < alone.size(); ++i) {
      ha.push_back(alone[i].text);
      ht.push_back(together[i].text);
      const bool diff = alone[i].text != together[i].text;
      changed += diff;
      if (test.src_tok[i].size() * 2 <= longest) {  // padded to at least twice its length in the batch
        ++short_count;
        changed_short += diff;
      }
    }
    const double bleu_alone = corpus_bleu(ha, {test.ref}).score, bleu_together = corpus_bleu(ht, {test.ref}).score;
    const double share = static_cast<double>(changed) / static_cast<double>(alone.size());
    runs.push_back({{"name", name}, {"mask", mask}, {"test_bleu_beam5", e.bleu}, {"greedy_bleu_alone", bleu_alone},
                    {"greedy_bleu_batched", bleu_together}, {"sentences", alone.size()}, {"changed", changed},
                    {"changed_share", share}, {"short_sentences", short_count}, {"short_changed", changed_short},
                    {"batch_padded_to", longest}, {"aer", e.aer ? json(*e.aer) : json(nullptr)}});
    rows.push_back({name, mask ? "on" : "off", num(e.bleu), num(bleu_alone), num(bleu_together),
                    std::to_string(changed) + " / " + std::to_string(alone.size()) + " (" + num(100 * share, 1) + "%)",
                    std::to_string(changed_short) + " / " + std::to_string(short_count)});
  }
  rep.figures = {{"runs", runs}};
  rep.table_html = html_table({"run", "mask", "test BLEU (beam 5)", "greedy BLEU alone", "greedy BLEU in one batch",
                               "translations that change", "of which half the batch length or shorter"},
                              rows);
  const json &m = runs[0], &u = runs[1];
  std::ostringstream f;
  f << "Decoded alone and then all " << m["sentences"].get<size_t>() << " test sentences in one batch (padded to "
    << m["batch_padded_to"].get<size_t>() << " words), the masked model changes " << m["changed"].get<int64_t>()
    << " translations; the model trained and decoded without the mask changes " << u["changed"].get<int64_t>() << " ("
    << num(100 * u["changed_share"].get<double>(), 1) << "%; " << u["short_changed"].get<int64_t>() << " of the "
    << u["short_sentences"].get<int64_t>() << " sentences at most half as long as the batch). Its greedy BLEU goes from "
    << num(u["greedy_bleu_alone"].get<double>()) << " alone to " << num(u["greedy_bleu_batched"].get<double>())
    << " batched (masked: " << num(m["greedy_bleu_alone"].get<double>()) << " and " << num(m["greedy_bleu_batched"].get<double>())
    << "); beam-5 test BLEU as evaluated (batches of similar lengths): " << num(u["test_bleu_beam5"].get<double>())
    << " without the mask, " << num(m["test_bleu_beam5"].get<double>()) << " with it.";
  rep.finding = f.str();
  return rep;
}

}  // namespace attnmt::lab_detail
