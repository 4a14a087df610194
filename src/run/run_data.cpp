#include "run/run_data.h"

#include <spdlog/spdlog.h>

#include "data/text.h"
#include "run/run_dir.h"

namespace attnmt {

namespace {
std::vector<EncodedPair> encode_all(const TokenizedCorpus& c, const Vocab& sv, const Vocab& tv) {
  std::vector<EncodedPair> out;
  out.reserve(c.examples.size());
  for (const auto& e : c.examples) out.push_back({sv.encode(e.src), tv.encode(e.tgt)});
  return out;
}

void log_filter(const std::string& name, const FilterStats& s, int max_len) {
  spdlog::info("{}: {} pairs read, {} kept, {} dropped as empty, {} dropped as longer than {} tokens", name, s.read,
               s.kept, s.dropped_empty, s.dropped_long, max_len);
}

// The SentencePiece models of a new run: the user's files, or trained on the training split
// (both sides together for a joint model), lowercased when the run lowercases.
void make_sentencepiece_models(const Config& cfg, const ParallelText& train_text, RunData& d) {
  const SpmConfig& spm = cfg.data.spm;
  if (!spm.src_model.empty()) {
    d.src_spm = read_sentencepiece_model(spm.src_model);
    d.tgt_spm = read_sentencepiece_model(spm.tgt_model);
    spdlog::info("SentencePiece models: {} and {}", spm.src_model, spm.tgt_model);
    return;
  }
  const SpmTrainOptions o{spm.vocab_size, spm.model_type, spm.character_coverage};
  auto prepared = [&](const std::vector<std::string>& lines) {
    if (!cfg.data.lowercase) return lines;
    std::vector<std::string> out;
    out.reserve(lines.size());
    for (const auto& l : lines) out.push_back(to_lower_utf8(l));
    return out;
  };
  const std::string what = config_key(cfg, &spm.vocab_size);
  if (spm.joint) {
    std::vector<std::string> both = prepared(train_text.src);
    for (auto& l : prepared(train_text.tgt)) both.push_back(std::move(l));
    d.src_spm = d.tgt_spm = train_sentencepiece(both, o, what);
  } else {
    d.src_spm = train_sentencepiece(prepared(train_text.src), o, what + " (source)");
    d.tgt_spm = train_sentencepiece(prepared(train_text.tgt), o, what + " (target)");
  }
  spdlog::info("SentencePiece: trained {} of {} pieces on {} training lines",
               spm.joint ? "one joint " + spm.model_type + " model" : "two " + spm.model_type + " models", spm.vocab_size,
               train_text.src.size());
}

}  // namespace

RunData prepare_data(const Config& cfg, bool load_vocab) {
  RunData d;
  const RunDir dir(cfg.run_dir);
  ParallelText train_text = read_split(cfg.data.train, config_split_path(cfg, cfg.data.train));
  ParallelText valid_text = read_split(cfg.data.valid, config_split_path(cfg, cfg.data.valid));
  if (cfg.data.tokenizer != "sentencepiece") {
    d.tok = Tokenizer::from_config(cfg.data, "", "");
  } else if (load_vocab) {  // resume: the run's own models, never retrained
    d.tok = Tokenizer::from_config(cfg.data, dir.src_spm(), dir.tgt_spm());
  } else {
    make_sentencepiece_models(cfg, train_text, d);
    d.tok = Tokenizer::pieces(d.src_spm, d.tgt_spm, cfg.data.lowercase, cfg.data.spm.src_model, cfg.data.spm.tgt_model);
  }
  TokenizedCorpus tr = tokenize_corpus(train_text, d.tok, cfg.data.max_len);
  TokenizedCorpus va = tokenize_corpus(valid_text, d.tok, cfg.data.max_len);
  log_filter("train", tr.stats, cfg.data.max_len);
  log_filter("valid", va.stats, cfg.data.max_len);
  if (load_vocab) {
    d.src_vocab = Vocab::load(dir.src_vocab());
    d.tgt_vocab = Vocab::load(dir.tgt_vocab());
  } else {
    std::vector<std::vector<std::string>> s, t;
    for (auto& e : tr.examples) {
      s.push_back(e.src);
      t.push_back(e.tgt);
    }
    if (d.tok.subword()) {  // every piece the training split uses: a rare piece must not become <unk>
      d.src_vocab = Vocab::build(s, 1, 0);
      d.tgt_vocab = Vocab::build(t, 1, 0);
    } else {
      d.src_vocab = Vocab::build(s, cfg.data.src_vocab.min_freq, cfg.data.src_vocab.max_size);
      d.tgt_vocab = Vocab::build(t, cfg.data.tgt_vocab.min_freq, cfg.data.tgt_vocab.max_size);
    }
  }
  spdlog::info("vocabularies: source {} types, target {} types", d.src_vocab.size(), d.tgt_vocab.size());
  d.train = encode_all(tr, d.src_vocab, d.tgt_vocab);
  d.valid = encode_all(va, d.src_vocab, d.tgt_vocab);
  for (const auto& e : va.examples) {
    std::string ref = valid_text.tgt[static_cast<size_t>(e.line)];
    d.valid_refs.push_back(cfg.data.lowercase ? to_lower_utf8(ref) : ref);
  }
  return d;
}

}  // namespace attnmt
