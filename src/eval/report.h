// Comparing runs: one summary per run (attention type, size, training time, test scores, BLEU by
// source length) and the report files: report.md, report.json, bleu_by_length.svg, index.html.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>


#include "run/result.h"
#include "viz/attention_maps.h"

namespace attnmt {

struct RunSummary {
  std::string dir;            // run directory
  std::string name;           // its last path component
  std::string attention;      // e.g. "bahdanau", "luong/general+feeding", "scaled_dot/4 heads"
  int64_t parameters = 0;
  double train_s = 0;         // training time (elapsed_s of the last validation)
  int64_t epochs = 0, steps = 0;
  std::string ended_by;       // what ended its training (train.json: "early stopping", "max_minutes", ...); "" unknown
  EvalResult eval;            // from run_dir/eval/<split>.json
  std::string maps;           // run_dir/maps/index.html when present
  std::string progress;       // run_dir/progress/index.html (attention during training) when present
  // The split's longest source sentence (the first of the longest), with the reference, this run's
  // translation (from eval/<split>.hyp) and, for an attention model, its attention map forcing the reference.
  struct LongSentence {
    int64_t line = -1;  // 0-based line of the split's files; -1 when unknown (explicit files, no hypotheses)
    std::string source, reference, translation;
    std::optional<AttentionMap> map;
  } longest;
};

// Reads a run; evaluates the split first (beam from the config) when its eval JSON is missing.
RunSummary summarize_run(const std::string& dir, const std::string& split, const std::string& device);

// What the numbers show, as plain sentences computed from them.
std::string comparison_paragraph(const std::vector<RunSummary>& runs);

// BLEU by source length side by side, one column per run, and each run's share of its shortest bucket's
// BLEU kept on its longest (buckets with at least 5% of the sentences), as plain text for the terminal; when any
// run says what ended its training, a last line "ended by".
std::string comparison_table_text(const std::vector<RunSummary>& runs);

// Writes report.md, report.json, bleu_by_length.svg and index.html into out.
void write_comparison(const std::string& out, const std::vector<RunSummary>& runs, const std::string& split);

}  // namespace attnmt
