// Attention maps to files: JSON, CSV, SVG heatmaps (with gold alignment markers and one panel per
// head) and an HTML gallery that opens in a browser with no server and no network.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "data/corpus.h"

namespace attnmt {

struct AttentionMap {
  std::vector<std::string> src_tokens;
  std::vector<std::string> tgt_tokens;
  std::vector<std::vector<float>> weights;              // [tgt_len][src_len], rows sum to 1
  std::vector<std::vector<std::vector<float>>> heads;   // [heads][tgt_len][src_len] for multi-head attention
  std::optional<Alignment> gold;                        // gold links (src, tgt) to overlay
  std::optional<double> aer;                            // of the argmax alignment against gold
  std::string source_text, target_text;                 // the sentence pair as text
  // Empty for cross-attention (rows target tokens, columns source tokens); a self-attention layer's map names
  // itself ("encoder layer 1", "decoder layer 2"): rows and columns are then one sequence.
  std::string self_attention;
};

std::string xml_escape(const std::string& s);
std::string csv_field(const std::string& s);

std::string attention_json(const AttentionMap& m);
std::string attention_csv(const AttentionMap& m);
std::string attention_svg(const AttentionMap& m);
// entries: file stem (e.g. "0001") and its map; formats: which per-sentence files exist to link.
std::string attention_gallery_html(const std::vector<std::pair<std::string, AttentionMap>>& entries,
                                   const std::string& title, const std::vector<std::string>& formats,
                                   std::optional<double> corpus_aer);

}  // namespace attnmt
