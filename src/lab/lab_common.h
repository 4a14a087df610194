// What the lab's experiments share: runs trained from a shipped config (or reused), the test set, number formats and
// the report page. Internal to src/lab/: each experiment is one file (lab_<name>.cpp) and lab.cpp lists them.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "common/config.h"
#include "data/corpus.h"
#include "lab/lab.h"
#include "run/result.h"

namespace attnmt::lab_detail {

// Three significant digits, for figures that span orders of magnitude (variances, gradient norms); "n/a" if not finite.
std::string sci(double v);
// `digits` decimals; "n/a" if not finite.
std::string num(double v, int digits = 2);

// A shipped config with overrides, trained into OUT/runs/<name>, or reused when a finished run of the same config is there.
struct LabRun {
  std::string name;
  Config cfg;
  bool reused = false;
  std::string dir() const { return cfg.run_dir; }
};

// A change an experiment makes to a shipped config, on its typed fields ([](Config& c) { c.model.attention.heads = 4; }):
// a misspelt key does not compile.
using Override = std::function<void(Config&)>;
// OPT.configs/FILE with run_dir OUT/runs/NAME, the lab's device and the overrides SETS, validated as `train` would.
Config lab_config(const LabOptions& opt, const std::string& name, const std::string& file, const std::vector<Override>& sets);
// The budget every compared model gets: the wall-clock minutes (to the millisecond), early stopping, no epoch cap (and
// MORE overrides).
std::vector<Override> budget(double minutes, const LabOptions& opt, std::vector<Override> more = {});
// Trains CFG unless OUT/runs/NAME holds a finished run of the same config (LabInterrupted when a signal stops it).
LabRun train_or_reuse(const LabOptions& opt, const std::string& name, const Config& cfg);
// The run's test evaluation with beam BEAM (read back when it is there and the run was reused).
EvalResult test_eval(const LabRun& r, int beam);

// The config's test split: lines, whitespace tokens and (when the config names them) gold alignments.
struct TestSet {
  std::vector<std::string> src, ref;
  std::vector<std::vector<std::string>> src_tok, ref_tok;
  std::vector<Alignment> align;
};
TestSet read_test_set(const Config& cfg);

// The pages: one report (OUT/<name>/lab.json and index.html) and the shared style of every lab page.
extern const char* const kPageStyle;
void write_report(const LabOptions& opt, LabReport& rep);
std::string html_table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows);

// The experiments, one file each, in the order `lab all` runs them.
LabReport bottleneck(const LabOptions& opt);
LabReport scaling(const LabOptions& opt);
LabReport masks(const LabOptions& opt);
LabReport explanation(const LabOptions& opt);
LabReport cost(const LabOptions& opt);
LabReport heads(const LabOptions& opt);
LabReport positions(const LabOptions& opt);
LabReport causal(const LabOptions& opt);

}  // namespace attnmt::lab_detail
