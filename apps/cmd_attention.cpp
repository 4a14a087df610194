// attnmt attention --run DIR --src FILE [--ref FILE] [--align FILE] --out OUTDIR [--limit N] [--beam K]
//                  [--format json,csv,svg,html]
#include <spdlog/spdlog.h>

#include "commands.h"
#include "common/errors.h"
#include "common/host.h"
#include "common/fs.h"
#include "eval/alignment.h"
#include "eval/evaluator.h"
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
}  // namespace

Command setup_attention(CLI::App& parent, const GlobalOptions& g) {
  struct Options {
    std::string run, src, ref, align, out;  // run dir, inputs, output dir
    int limit = 0;                          // first N sentences (0 = all)
    int beam = 1;                           // beam for decoding (without --ref)
    std::string formats = "json,csv,svg,html";
    std::string checkpoint = "best";
  };
  auto opt = std::make_shared<Options>();
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
  return {app, [opt, &g]() -> int {
            std::vector<std::string> formats;
            {
              std::string f = opt->formats;
              std::replace(f.begin(), f.end(), ',', ' ');
              for (const auto& x : split_whitespace(f)) {
                if (x != "json" && x != "csv" && x != "svg" && x != "html")
                  throw UsageError("--format: unknown format '" + x + "'. Valid options: json, csv, svg, html");
                formats.push_back(x);
              }
              if (formats.empty()) throw UsageError("--format: name at least one format");
            }
            auto has = [&](const char* f) { return std::find(formats.begin(), formats.end(), f) != formats.end(); };
            if (!opt->align.empty() && opt->ref.empty())
              throw UsageError("--align needs --ref: gold alignments refer to the reference tokens");
            LoadedRun run = load_run(opt->run, opt->checkpoint, g.device);
            if (!run.model->decoder->has_attention())
              throw UsageError(opt->run + ": attention type 'none' has no attention weights to draw: its decoder sees one fixed "
                               "context vector (the encoder's final state) at every step");
            std::vector<std::string> srcs = read_lines(opt->src);
            std::vector<std::string> refs;
            if (!opt->ref.empty()) {
              refs = read_lines(opt->ref);
              check_same_line_count(opt->src, srcs.size(), opt->ref, refs.size());
            }
            size_t n = srcs.size();
            if (opt->limit > 0) n = std::min(n, static_cast<size_t>(opt->limit));
            srcs.resize(n);
            if (!refs.empty()) refs.resize(n);
            std::vector<std::vector<std::string>> src_tok(n), tgt_tok(n);
            std::vector<std::string> tgt_text(n);
            for (size_t i = 0; i < n; ++i) src_tok[i] = run.tok.encode(srcs[i], Side::kSource);
            if (!refs.empty()) {
              for (size_t i = 0; i < n; ++i) {
                tgt_tok[i] = run.tok.encode(refs[i], Side::kTarget);
                tgt_text[i] = refs[i];
              }
            } else {
              SearchOptions so = search_options(run.cfg.eval, opt->beam);
              auto tr = translate_lines(run, srcs, so, run.cfg.eval.batch_size);
              for (size_t i = 0; i < n; ++i) {
                tgt_tok[i] = tr[i].tgt_tokens;
                tgt_text[i] = tr[i].text;
              }
            }
            std::vector<Alignment> aligns;
            if (!opt->align.empty()) {
              std::vector<size_t> sl, tl;
              for (size_t i = 0; i < n; ++i) {  // gold alignments are between words
                sl.push_back(run.tok.join_words(src_tok[i]).size());
                tl.push_back(run.tok.join_words(tgt_tok[i]).size());
              }
              aligns = read_alignments(opt->align, &sl, &tl, /*prefix=*/true);  // --limit may use the first lines only
            }
            // Maps come from forcing the chosen target through the model: the same computation as decoding.
            std::vector<torch::Tensor> heads;
            std::vector<SelfAttentionMaps> self_maps;
            auto weights = forced_attention(run, src_tok, tgt_tok, &heads, nullptr, &self_maps);
            make_dirs(opt->out);
            std::vector<std::pair<std::string, AttentionMap>> entries;
            AerCounts total;
            for (size_t i = 0; i < n; ++i) {
              AttentionMap m;
              m.src_tokens = src_tok[i];
              m.tgt_tokens = tgt_tok[i];
              m.weights = weights[i];
              m.source_text = srcs[i];
              m.target_text = tgt_text[i];
              if (heads[i].defined() && heads[i].size(0) > 1) m.heads = head_rows(heads[i]);
              char stem[16];
              std::snprintf(stem, sizeof(stem), "%04zu", i + 1);
              if (m.src_tokens.empty() || m.tgt_tokens.empty()) {
                spdlog::warn("sentence {}: empty source or target, no map", i + 1);
                continue;
              }
              // A subword run gets two maps per sentence: pieces (NNNN.*) and words (NNNN.words.*, source
              // columns summed and target rows averaged over each word's pieces); AER is taken on words.
              std::optional<AttentionMap> words;
              if (run.tok.subword()) {
                AttentionMap w;
                w.src_tokens = run.tok.join_words(m.src_tokens);
                w.tgt_tokens = run.tok.join_words(m.tgt_tokens);
                w.weights = word_level_map(m.weights, run.tok.word_index(m.src_tokens), run.tok.word_index(m.tgt_tokens));
                w.source_text = m.source_text;
                w.target_text = m.target_text;
                words = std::move(w);
              }
              AttentionMap& scored = words ? *words : m;
              if (!aligns.empty()) {
                scored.gold = aligns[i];
                AerCounts c = aer_counts(hard_alignment(scored.weights), aligns[i]);
                total.add(c);
                scored.aer = c.aer();
              }
              auto write = [&](const std::string& name, AttentionMap map) {
                const std::string base = opt->out + "/" + name;
                if (has("json")) write_file_atomic(base + ".json", attention_json(map));
                if (has("csv")) write_file_atomic(base + ".csv", attention_csv(map));
                if (has("svg")) write_file_atomic(base + ".svg", attention_svg(map));
                entries.emplace_back(name, std::move(map));
              };
              // Self-attention, per layer (one panel per head): source x source, and target x target over the
              // decoder's inputs (<bos> y1 .. y_T), where the causal mask leaves the upper triangle 0.
              std::vector<std::pair<std::string, AttentionMap>> self;
              std::vector<std::string> dec_inputs = {"<bos>"};
              dec_inputs.insert(dec_inputs.end(), m.tgt_tokens.begin(), m.tgt_tokens.end());
              for (size_t l = 0; l < self_maps[i].encoder.size(); ++l)
                self.emplace_back(std::string(stem) + ".encoder" + std::to_string(l + 1),
                                  self_attention_map(self_maps[i].encoder[l], m.src_tokens, m, "encoder layer " + std::to_string(l + 1)));
              for (size_t l = 0; l < self_maps[i].decoder.size(); ++l)
                self.emplace_back(std::string(stem) + ".decoder" + std::to_string(l + 1),
                                  self_attention_map(self_maps[i].decoder[l], dec_inputs, m, "decoder layer " + std::to_string(l + 1)));
              write(stem, std::move(m));
              if (words) write(std::string(stem) + ".words", std::move(*words));
              for (auto& [name, map] : self) write(name, std::move(map));
            }
            std::optional<double> corpus_aer;
            if (!aligns.empty()) corpus_aer = total.aer();
            if (has("html"))
              write_file_atomic(opt->out + "/index.html",
                                attention_gallery_html(entries, "attnmt attention maps: " + opt->run, formats, corpus_aer));
            spdlog::info("wrote {} attention maps to {}{}", entries.size(), opt->out, has("html") ? " (open index.html)" : "");
            if (corpus_aer) spdlog::info("AER of the argmax alignments: {:.3f}", *corpus_aer);
            return 0;
          }};
}

}  // namespace attnmt::cli
