// The attention lab: each claim of the lesson as an experiment on the shipped corpus, run into a report
// directory (lab.json with every figure, SVG charts, index.html with a finding computed from the figures),
// and lab/index.html linking them. The layer above train/ and eval/: it trains and evaluates through them.
#pragma once
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace attnmt {

struct LabOptions {
  std::string out = "lab";          // reports: OUT/<experiment>/, OUT/index.html; trained runs: OUT/runs/<name>/
  std::string configs = "configs";  // the shipped configs the runs start from (they name data/toy)
  std::string device = "auto";      // where models train and decode (auto | cpu | cuda[:N])
  double minutes = 2;               // wall budget of each model the masks and heads experiments compare
  double bottleneck_minutes = 6;    // wall budget of each model of the fair bottleneck (long enough for `none` to converge)
  int patience = 3;                 // validations without improvement that end a run early
  int scaling_steps = 1500;         // updates of each scaling run (the same for all four)
  int explain_sentences = 120;      // test sentences the attribution experiment reads (spread over the lengths)
  bool retrain = false;             // train again even where OUT/runs/<name> holds a finished run of the same config
};

// What one experiment found: its figures (lab.json), the finding (sentences computed from them) and the page.
struct LabReport {
  std::string name;                 // experiment name (its directory)
  std::string title;                // one line
  std::string claim;                // what the lesson says (fixed text: the claim being tested)
  std::string finding;              // what the numbers say (computed)
  nlohmann::json figures;           // every figure
  std::vector<std::string> charts;  // SVG files in the report directory
  std::string table_html;           // the main table
  double seconds = 0;               // how long the experiment took
};

// A training inside an experiment stopped by SIGINT/SIGTERM (its run resumes from scratch next time; the runs
// finished before it are reused).
struct LabInterrupted : std::runtime_error {
  LabInterrupted(const std::string& what, int code) : std::runtime_error(what), exit_code(code) {}
  int exit_code;
};

// The experiments, in the order `lab all` runs them.
const std::vector<std::string>& lab_experiments();

// Runs one experiment (a name of lab_experiments()) and writes OUT/<name>/ and OUT/index.html. UsageError for an
// unknown name (listing the valid ones) or a missing config.
LabReport run_lab_experiment(const std::string& name, const LabOptions& opt);

// Writes OUT/index.html from the lab.json files present under OUT.
void write_lab_index(const LabOptions& opt);

}  // namespace attnmt
