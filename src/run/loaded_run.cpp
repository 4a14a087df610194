#include "run/loaded_run.h"

#include <filesystem>

#include "common/errors.h"
#include "common/fs.h"
#include "common/runtime.h"
#include "model/checkpoint.h"
#include "run/run_dir.h"

namespace attnmt {

namespace fs = std::filesystem;

LoadedRun load_run(const std::string& run_dir, const std::string& which, const std::string& device_spec) {
  if (!fs::is_directory(run_dir)) throw UsageError(run_dir + ": run directory not found");
  const RunDir dir(run_dir);
  for (const auto& f : dir.required_files())
    if (!fs::is_regular_file(f)) throw UsageError(run_dir + ": missing " + fs::path(f).filename().string() + " (not a training run?)");
  LoadedRun r;
  try {
    r.cfg = config_from_json(read_json_file(dir.config()));
  } catch (const UsageError& e) {
    throw UsageError(dir.config() + ": " + e.what());
  }
  r.src_vocab = Vocab::load(dir.src_vocab());
  r.tgt_vocab = Vocab::load(dir.tgt_vocab());
  r.tok = Tokenizer::from_config(r.cfg.data, dir.src_spm(), dir.tgt_spm());
  r.device = resolve_device(device_spec.empty() ? r.cfg.device : device_spec);
  r.model = Seq2Seq(r.cfg.model, r.src_vocab.size(), r.tgt_vocab.size());
  if (which == "best" || which == "last") {
    r.checkpoint = dir.checkpoint(which);
  } else if (fs::is_regular_file(which)) {
    r.checkpoint = which;
  } else {
    throw UsageError("--checkpoint: '" + which + "' is neither best, last nor a checkpoint file");
  }
  load_checkpoint(r.checkpoint, r.model, nullptr);
  r.model->to(r.device);
  r.model->eval();
  return r;
}

}  // namespace attnmt
