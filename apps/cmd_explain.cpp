// attnmt explain --example | --run DIR --src "sentence" [--step N | --word W] [--part cross|encoder|decoder]
//                [--layer L] [--head H] [--beam K] [--format text|json]
// One attention step computed the way the lesson writes it, with the trained model's own numbers (translate/explain.h),
// or the tutorial's worked example through the same scaled dot-product function.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <numeric>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "common/errors.h"
#include "run/loaded_run.h"
#include "translate/explain.h"

namespace attnmt::cli {
namespace {

std::string fixed3(double x) {
  if (std::isinf(x)) return x < 0 ? "-inf" : "inf";
  char b[32];
  std::snprintf(b, sizeof b, "%.3f", x);
  return b;
}

double norm(const std::vector<double>& v) {
  return std::sqrt(std::inner_product(v.begin(), v.end(), v.begin(), 0.0));
}

// A long vector as its first entries and its norm; a short one whole.
std::string vec(const std::vector<double>& v, size_t shown = 6) {
  std::string s = "[";
  for (size_t i = 0; i < std::min(v.size(), shown); ++i) s += (i ? ", " : "") + fixed3(v[i]);
  if (v.size() > shown) s += ", ... (" + std::to_string(v.size()) + " entries)";
  return s + "]" + (v.size() > shown ? "  norm " + fixed3(norm(v)) : "");
}

// w followed by spaces up to `width` characters (UTF-8: a character is a byte that does not continue another).
std::string padded(const std::string& w, size_t width) {
  size_t chars = 0;
  for (unsigned char c : w) chars += (c & 0xC0) != 0x80;
  return w + std::string(chars < width ? width - chars : 0, ' ');
}

// One head's lookup as the lesson's steps, one line per key token (a masked one says so: its score plays no part), the
// largest weights named last.
void print_lookup(const HeadLookup& l, const std::vector<std::string>& source, const std::vector<bool>& masked, double scale,
                  const std::string& indent) {
  std::printf("%s%s %10s %10s %10s\n", indent.c_str(), padded("key token", 16).c_str(), "score", "x scale", "weight");
  for (size_t s = 0; s < l.weights.size(); ++s) {
    const bool hidden = s < masked.size() && masked[s];
    std::printf("%s%s %10s %10s %10s\n", indent.c_str(), padded(s < source.size() ? source[s] : "?", 16).c_str(),
                hidden ? "masked" : fixed3(l.scores[s]).c_str(), hidden ? "-inf" : fixed3(l.scaled[s]).c_str(),
                fixed3(l.weights[s]).c_str());
  }
  std::printf("%sscale %s; the weights sum to %s\n", indent.c_str(), fixed3(scale).c_str(),
              fixed3(std::accumulate(l.weights.begin(), l.weights.end(), 0.0)).c_str());
  std::vector<size_t> order(l.weights.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return l.weights[a] > l.weights[b]; });
  std::string top;
  for (size_t i = 0; i < std::min<size_t>(3, order.size()); ++i) {
    char pct[32];
    std::snprintf(pct, sizeof pct, " %.1f%%", 100 * l.weights[order[i]]);
    top += (i ? ", " : "") + (order[i] < source.size() ? source[order[i]] : "?") + pct;
  }
  std::printf("%scontext = sum of weight x value: %s\n%s  most of it from: %s\n", indent.c_str(), vec(l.context).c_str(),
              indent.c_str(), top.c_str());
}

int example(bool json) {
  const WorkedExample x = worked_example();
  if (json) {
    std::cout << nlohmann::json({{"query", x.query}, {"keys", x.keys}, {"values", x.values}, {"scale", x.scale},
                                 {"scores", x.lookup.scores}, {"scaled", x.lookup.scaled},
                                 {"weights", x.lookup.weights}, {"output", x.lookup.context.at(0)}})
                     .dump(2)
              << "\n";
    return 0;
  }
  std::printf("The worked example: one query against three keys, through the scaled dot-product function the models use.\n");
  std::printf("query q = %s\n", vec(x.query).c_str());
  for (size_t i = 0; i < x.keys.size(); ++i)
    std::printf("key k%zu = %s   value v%zu = %s\n", i + 1, vec(x.keys[i]).c_str(), i + 1, fixed3(x.values[i]).c_str());
  std::printf("1. scores q . k_j: %s\n", vec(x.lookup.scores).c_str());
  std::printf("2. scaled by 1/sqrt(d_k) = 1/sqrt(4) = %s: %s\n", fixed3(x.scale).c_str(), vec(x.lookup.scaled).c_str());
  std::printf("3. softmax: weights %s (sum %s)\n", vec(x.lookup.weights).c_str(),
              fixed3(std::accumulate(x.lookup.weights.begin(), x.lookup.weights.end(), 0.0)).c_str());
  std::printf("4. output = sum of weight x value = %s\n", fixed3(x.lookup.context.at(0)).c_str());
  std::printf("A soft dictionary lookup: every value contributes, in proportion to how well its key matches the query.\n");
  return 0;
}

// head: the one head printed in text (1-based; 0: all).
int explain(LoadedRun& run, const std::string& src, const ExplainOptions& o, int64_t head, bool json) {
  const StepExplanation e = explain_step(run, src, o);
  if (head > static_cast<int64_t>(e.heads.size()))
    throw UsageError("explain: --head must be between 1 and " + std::to_string(e.heads.size()) + " (this attention's heads), got " +
                     std::to_string(head));
  if (json) {
    std::cout << explanation_json(e).dump(2) << "\n";
    return 0;
  }
  auto join = [](const std::vector<std::string>& v) {
    std::string s;
    for (const auto& w : v) s += (s.empty() ? "" : " ") + w;
    return s;
  };
  std::printf("source: %s\ntranslation: %s\n", join(e.source).c_str(), join(e.target).c_str());
  const std::string layer = e.layers > 0 ? ", layer " + std::to_string(e.layer) + " of " + std::to_string(e.layers) : "";
  if (e.part == "encoder")
    std::printf("source position %lld ('%s'); attention: %s%s\n", static_cast<long long>(e.step), e.query_token.c_str(),
                e.mechanism.c_str(), layer.c_str());
  else if (e.part == "decoder")
    std::printf("step %lld, at '%s', which produced '%s'; attention: %s%s\n", static_cast<long long>(e.step),
                e.query_token.c_str(), e.produced.c_str(), e.mechanism.c_str(), layer.c_str());
  else
    std::printf("step %lld, which produced '%s'; attention: %s%s\n", static_cast<long long>(e.step), e.produced.c_str(),
                e.mechanism.c_str(), layer.c_str());
  if (e.heads.empty()) {
    std::printf("%s\ncontext (the same at every step): %s\n", e.score_formula.c_str(), vec(e.context).c_str());
    return 0;
  }
  std::printf("query (%s): %s\n%s\n%s\n", e.query_is.c_str(), vec(e.query).c_str(), e.score_formula.c_str(),
              e.scale_reason.c_str());
  for (size_t h = 0; h < e.heads.size(); ++h) {
    if (head > 0 && static_cast<int64_t>(h) + 1 != head) continue;
    if (e.heads.size() > 1) std::printf("head %zu of %zu:\n", h + 1, e.heads.size());
    print_lookup(e.heads[h], e.keys, e.masked, e.scale, e.heads.size() > 1 ? "  " : "");
  }
  if (e.heads.size() > 1) std::printf("context = W_o [c_1; ...; c_%zu]: %s\n", e.heads.size(), vec(e.context).c_str());
  std::printf("the forward pass's own context here differs from the one formed above by at most %.1e\n", e.context_check);
  return 0;
}

}  // namespace

Command setup_explain(CLI::App& parent, const GlobalOptions& g) {
  struct Options {
    bool example = false;
    std::string run, src, word, format = "text", checkpoint = "best", part = "cross";
    int64_t step = 0, layer = 0, head = 0;
    int beam = 0;
  };
  auto opt = std::make_shared<Options>();
  auto* app = parent.add_subcommand("explain", "One attention step of a trained model, computed the way the lesson "
                                               "writes it (query, scores, scaling, softmax, weighted sum), or the "
                                               "tutorial's worked example");
  auto* ex = app->add_flag("--example", opt->example, "The tutorial's worked example (query, three keys, three values)");
  app->add_option("--run,-r", opt->run, "Run directory")->excludes(ex);
  app->add_option("--src", opt->src, "The source sentence (the model translates it, then one step is explained)")->excludes(ex);
  auto* step = app->add_option("--step", opt->step, "The target position explained, 1-based (default 1)")
                   ->check(CLI::Range(int64_t{1}, int64_t{100000}));
  app->add_option("--word", opt->word, "Or the first step that produced this target token")->excludes(step);
  app->add_option("--part", opt->part, "cross (the decoder's attention over the source), or a self-attention stack's own: "
                                       "encoder (--step: a source position) or decoder (causal)")
      ->check(CLI::IsMember({"cross", "encoder", "decoder"}));
  app->add_option("--layer", opt->layer, "The self-attention layer, 1-based (default: the last)")
      ->check(CLI::Range(int64_t{1}, int64_t{64}));
  app->add_option("--head", opt->head, "Print this head only, 1-based (default: every head; JSON has them all)")
      ->check(CLI::Range(int64_t{1}, int64_t{1024}));
  app->add_option("--beam", opt->beam, "Beam size of the decoding (default: the run's eval.beam_size)")->check(CLI::Range(1, 64));
  app->add_option("--checkpoint", opt->checkpoint, "best | last | a checkpoint file of the run");
  app->add_option("--format", opt->format, "text | json")->check(CLI::IsMember({"text", "json"}));
  return {app, [opt, &g]() -> int {
            const bool json = opt->format == "json";
            if (opt->example) return example(json);
            if (opt->run.empty() || opt->src.empty()) throw UsageError("explain: give --run DIR and --src SENTENCE, or --example");
            LoadedRun run = load_run(opt->run, opt->checkpoint, g.device);
            ExplainOptions o;
            o.step = opt->step;
            o.word = opt->word;
            o.beam = opt->beam;
            o.part = opt->part;
            o.layer = opt->layer;
            return explain(run, opt->src, o, opt->head, json);
          }};
}

}  // namespace attnmt::cli
