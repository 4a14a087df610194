// attnmt attention --run DIR --src FILE [--ref FILE] [--align FILE] --out OUTDIR [--limit N] [--beam K]
//                  [--format json,csv,svg,html]
#include <algorithm>
#include <optional>
#include <utility>

#include <spdlog/spdlog.h>

#include "commands.h"
#include "common/errors.h"
#include "common/host.h"
#include "common/fs.h"
#include "translate/alignment.h"
#include "eval/aer.h"
#include "translate/translator.h"
#include "viz/attention_maps.h"

namespace attnmt::cli {
namespace {
// [heads, Q, K] -> [heads][Q][K]
std::vector<std::vector<std::vector<float>>> head_rows(const torch::Tensor& heads) {
  std::vector<std::vector<std::vector<float>>> out;
  const HostTensor h = to_host(heads, torch::kFloat);  // [heads, T, S]
  for (int64_t k = 0; k < h.size(0); ++k) {
    std::vector<std::vector<float>> rows;
    for (int64_t j = 0; j < h.size(1); ++j) {
      const int64_t at = (k * h.size(1) + j) * h.size(2);
      rows.push_back(h.values<float>(at, at + h.size(2)));
    }
    out.push_back(std::move(rows));
  }
  return out;
}
// A self-attention layer's map: queries and keys from one sequence (tokens), the mean of the heads, and each head.
AttentionMap self_attention_map(const torch::Tensor& heads, const std::vector<std::string>& tokens, const AttentionMap& pair,
                                const std::string& layer) {
  AttentionMap m;
  m.self_attention = layer;
  m.src_tokens = m.tgt_tokens = tokens;
  m.weights = head_rows(heads.mean(0, true))[0];
  if (heads.size(0) > 1) m.heads = head_rows(heads);
  m.source_text = pair.source_text;
  m.target_text = pair.target_text;
  return m;
}

struct AttentionOptions {
  std::string run, src, ref, align, out;  // run dir, inputs, output dir
  int limit = 0;                          // first N sentences (0 = all)
  int beam = 1;                           // beam for decoding (without --ref)
  std::string formats = "json,csv,svg,html";
  std::string checkpoint = "best";
};

std::vector<std::string> parse_formats(std::string f) {
  std::vector<std::string> formats;
  std::replace(f.begin(), f.end(), ',', ' ');
  for (const auto& x : split_whitespace(f)) {
    if (x != "json" && x != "csv" && x != "svg" && x != "html")
      throw UsageError("--format: unknown format '" + x + "'. Valid options: json, csv, svg, html");
    formats.push_back(x);
  }
  if (formats.empty()) throw UsageError("--format: name at least one format");
  return formats;
}

// The sentences drawn: source tokens, and target tokens and text from the reference (forced) or from decoding.
struct DrawnSentences {
  std::vector<std::string> srcs;
  std::vector<std::vector<std::string>> src_tok, tgt_tok;
  std::vector<std::string> tgt_text;
};

DrawnSentences drawn_sentences(LoadedRun& run, const AttentionOptions& o) {
  DrawnSentences d;
  d.srcs = read_lines(o.src);
  std::vector<std::string> refs;
  if (!o.ref.empty()) {
    refs = read_lines(o.ref);
    check_same_line_count(o.src, d.srcs.size(), o.ref, refs.size());
  }
  size_t n = d.srcs.size();
  if (o.limit > 0) n = std::min(n, static_cast<size_t>(o.limit));
  d.srcs.resize(n);
  if (!refs.empty()) refs.resize(n);
  d.src_tok.resize(n);
  d.tgt_tok.resize(n);
  d.tgt_text.resize(n);
  for (size_t i = 0; i < n; ++i) d.src_tok[i] = run.tok.encode(d.srcs[i], Side::kSource);
  if (!refs.empty()) {
    for (size_t i = 0; i < n; ++i) {
      d.tgt_tok[i] = run.tok.encode(refs[i], Side::kTarget);
      d.tgt_text[i] = refs[i];
    }
  } else {
    SearchOptions so = search_options(run.cfg.eval, o.beam);
    auto tr = Translator(run, so).best(d.srcs);
    for (size_t i = 0; i < n; ++i) {
      d.tgt_tok[i] = tr[i].tgt_tokens;
      d.tgt_text[i] = tr[i].text;
    }
  }
  return d;
}

// Gold alignments (between words) of the drawn sentences; --limit may use the first lines only.
std::vector<Alignment> read_gold(const LoadedRun& run, const DrawnSentences& d, const std::string& file) {
  std::vector<size_t> sl, tl;
  for (size_t i = 0; i < d.srcs.size(); ++i) {
    sl.push_back(run.tok.join_words(d.src_tok[i]).size());
    tl.push_back(run.tok.join_words(d.tgt_tok[i]).size());
  }
  return read_alignments(file, &sl, &tl, /*prefix=*/true);
}

// Writes each map in the chosen formats and keeps it for the gallery.
struct MapWriter {
  const std::string& out;
  const std::vector<std::string>& formats;
  std::vector<std::pair<std::string, AttentionMap>> entries;

  bool has(const char* f) const { return std::find(formats.begin(), formats.end(), f) != formats.end(); }
  void write(const std::string& name, AttentionMap map) {
    const std::string base = out + "/" + name;
    if (has("json")) write_file_atomic(base + ".json", attention_json(map));
    if (has("csv")) write_file_atomic(base + ".csv", attention_csv(map));
    if (has("svg")) write_file_atomic(base + ".svg", attention_svg(map));
    entries.emplace_back(name, std::move(map));
  }
};

// A subword run gets two maps per sentence: pieces (NNNN.*) and words (NNNN.words.*, source columns summed and target
// rows averaged over each word's pieces); AER is taken on words.
std::optional<AttentionMap> word_map(const LoadedRun& run, const AttentionMap& m) {
  if (!run.tok.subword()) return std::nullopt;
  WordLevel words = word_level(run.tok, m.src_tokens, m.tgt_tokens, m.weights);
  AttentionMap w;
  w.src_tokens = std::move(words.src);
  w.tgt_tokens = std::move(words.tgt);
  w.weights = std::move(words.weights);
  w.source_text = m.source_text;
  w.target_text = m.target_text;
  return w;
}

// Self-attention, per layer (one panel per head): source x source, and target x target over the decoder's inputs
// (<bos> y1 .. y_T), where the causal mask leaves the upper triangle 0.
std::vector<std::pair<std::string, AttentionMap>> self_attention_maps(const SelfAttentionMaps& maps, const AttentionMap& m,
                                                                       const std::string& stem) {
  std::vector<std::pair<std::string, AttentionMap>> self;
  std::vector<std::string> dec_inputs = {"<bos>"};
  dec_inputs.insert(dec_inputs.end(), m.tgt_tokens.begin(), m.tgt_tokens.end());
  for (size_t l = 0; l < maps.encoder.size(); ++l)
    self.emplace_back(stem + ".encoder" + std::to_string(l + 1),
                      self_attention_map(maps.encoder[l], m.src_tokens, m, "encoder layer " + std::to_string(l + 1)));
  for (size_t l = 0; l < maps.decoder.size(); ++l)
    self.emplace_back(stem + ".decoder" + std::to_string(l + 1),
                      self_attention_map(maps.decoder[l], dec_inputs, m, "decoder layer " + std::to_string(l + 1)));
  return self;
}

int run_attention(const AttentionOptions& o, const GlobalOptions& g) {
  const std::vector<std::string> formats = parse_formats(o.formats);
  if (!o.align.empty() && o.ref.empty()) throw UsageError("--align needs --ref: gold alignments refer to the reference tokens");
  LoadedRun run = load_run(o.run, o.checkpoint, g.device);
  if (!run.model->decoder->has_attention())
    throw UsageError(o.run + ": attention type 'none' has no attention weights to draw: its decoder sees one fixed "
                     "context vector (the encoder's final state) at every step");
  const DrawnSentences d = drawn_sentences(run, o);
  const size_t n = d.srcs.size();
  const std::vector<Alignment> aligns = o.align.empty() ? std::vector<Alignment>{} : read_gold(run, d, o.align);
  // Maps come from forcing the chosen target through the model: the same computation as decoding.
  std::vector<torch::Tensor> heads;
  std::vector<SelfAttentionMaps> self_maps;
  auto weights = forced_attention(run, d.src_tok, d.tgt_tok, &heads, nullptr, &self_maps);
  make_dirs(o.out);
  MapWriter writer{o.out, formats, {}};
  AerCounts total;
  for (size_t i = 0; i < n; ++i) {
    AttentionMap m;
    m.src_tokens = d.src_tok[i];
    m.tgt_tokens = d.tgt_tok[i];
    m.weights = weights[i];
    m.source_text = d.srcs[i];
    m.target_text = d.tgt_text[i];
    if (heads[i].defined() && heads[i].size(0) > 1) m.heads = head_rows(heads[i]);
    char stem[24];  // a size_t needs up to 20 digits
    std::snprintf(stem, sizeof(stem), "%04zu", i + 1);
    if (m.src_tokens.empty() || m.tgt_tokens.empty()) {
      spdlog::warn("sentence {}: empty source or target, no map", i + 1);
      continue;
    }
    std::optional<AttentionMap> words = word_map(run, m);
    AttentionMap& scored = words ? *words : m;
    if (!aligns.empty()) {
      scored.gold = aligns[i];
      AerCounts c = aer_counts(hard_alignment(scored.weights), aligns[i]);
      total.add(c);
      scored.aer = c.aer();
    }
    auto self = self_attention_maps(self_maps[i], m, stem);
    writer.write(stem, std::move(m));
    if (words) writer.write(std::string(stem) + ".words", std::move(*words));
    for (auto& [name, map] : self) writer.write(name, std::move(map));
  }
  std::optional<double> corpus_aer;
  if (!aligns.empty()) corpus_aer = total.aer();
  if (writer.has("html"))
    write_file_atomic(o.out + "/index.html",
                      attention_gallery_html(writer.entries, "attnmt attention maps: " + o.run, formats, corpus_aer));
  spdlog::info("wrote {} attention maps to {}{}", writer.entries.size(), o.out, writer.has("html") ? " (open index.html)" : "");
  if (corpus_aer) spdlog::info("AER of the argmax alignments: {:.3f}", *corpus_aer);
  return 0;
}

}  // namespace

Command setup_attention(CLI::App& parent, const GlobalOptions& g) {
  auto opt = std::make_shared<AttentionOptions>();
  auto* app = parent.add_subcommand("attention", "Write attention maps (JSON, CSV, SVG, HTML gallery) for source sentences");
  app->add_option("--run,-r", opt->run, "Run directory")->required();
  app->add_option("--src", opt->src, "Source sentences, one per line")->required();
  app->add_option("--ref", opt->ref, "Reference translations: force-decode them so maps follow the gold target");
  app->add_option("--align", opt->align, "Gold alignments (Pharaoh, source-reference) to overlay; needs --ref");
  app->add_option("--out,-o", opt->out, "Output directory")->required();
  app->add_option("--limit", opt->limit, "Only the first N sentences (0 = all)")->check(CLI::NonNegativeNumber);
  app->add_option("--beam", opt->beam, "Beam size when decoding (without --ref)")->capture_default_str()->check(CLI::Range(1, 100));
  app->add_option("--format", opt->formats, "Comma-separated: json, csv, svg, html")->capture_default_str();
  app->add_option("--checkpoint", opt->checkpoint, "best | last | a checkpoint file of this run's model (e.g. from `attnmt average`)")->capture_default_str();
  return {app, [opt, &g]() -> int { return run_attention(*opt, g); }};
}

}  // namespace attnmt::cli
