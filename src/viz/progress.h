// Watching attention being learned: the attention maps of a few fixed validation sentences at every
// validation (run_dir/progress/step-NNNNNNNN.json) and a page that shows them as a sequence with a step
// slider (progress/index.html: plain HTML, inline SVG and a few lines of inline script, no server).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "viz/attention_maps.h"

namespace attnmt {

struct ProgressSnapshot {
  int64_t step = 0;
  int64_t epoch = 0;        // 1-based
  double valid_bleu = 0;    // greedy validation BLEU at this step
  std::vector<AttentionMap> maps;  // one per snapshot sentence, weights [tgt_len][src_len] (forced decoding)
  // A self-attention stack's last layer (mean of its heads), one per sentence; empty where the stack is recurrent.
  // Encoder: [src_len][src_len]; decoder: [tgt_len][tgt_len] over its inputs (<bos> and the reference before each
  // step), the causal triangle.
  std::vector<AttentionMap> encoder_self, decoder_self;
};

nlohmann::json progress_snapshot_json(const ProgressSnapshot& s);
// The inverse; throws nlohmann::json::exception on a malformed snapshot.
ProgressSnapshot progress_snapshot_from_json(const nlohmann::json& j);

// The page: per sentence, its maps in step order (at most 16 validations, evenly spread, first and last
// included), one shown at a time, chosen with a slider.
std::string progress_html(const std::vector<ProgressSnapshot>& snapshots, const std::string& title);
// The page of a model without attention: it says there is nothing to show, and why.
std::string progress_html_without_attention(const std::string& title);

}  // namespace attnmt
