// A trained run loaded for use: its config, vocabularies, tokenizer and model on a device. Evaluation, translation,
// the server and the lab all start from one.
#pragma once
#include <string>

#include <torch/torch.h>

#include "common/config.h"
#include "data/tokenizer.h"
#include "data/vocab.h"
#include "model/seq2seq.h"

namespace attnmt {

struct LoadedRun {
  Config cfg;
  Vocab src_vocab, tgt_vocab;
  Seq2Seq model{nullptr};
  torch::Device device = torch::kCPU;
  Tokenizer tok;  // the run's tokenizer (its SentencePiece models for a subword run)
  std::string checkpoint;  // path loaded
};

// Reads run_dir/config.json, the vocabularies and a checkpoint: which = best | last (run_dir/best.pt,
// last.pt) or the path of a checkpoint file of the same model (an averaged one); throws UsageError on
// anything missing or inconsistent. device_spec empty = the run's config. The model is left in eval mode.
LoadedRun load_run(const std::string& run_dir, const std::string& which = "best", const std::string& device_spec = "");

}  // namespace attnmt
