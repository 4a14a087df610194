#include "lab/lab.h"

#include <algorithm>
#include <array>
#include <filesystem>
#include <sstream>

#include <spdlog/spdlog.h>

#include "common/errors.h"
#include "common/fs.h"
#include "common/progress.h"
#include "lab/lab_common.h"
#include "viz/attention_maps.h"

namespace attnmt {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
// The experiments, in the order `lab all` runs them: each is one file, lab_<name>.cpp.
struct Experiment {
  const char* name;
  LabReport (*run)(const LabOptions&);
};
const std::array<Experiment, 8> kExperiments = {{{"bottleneck", lab_detail::bottleneck},
                                                 {"scaling", lab_detail::scaling},
                                                 {"masks", lab_detail::masks},
                                                 {"explanation", lab_detail::explanation},
                                                 {"cost", lab_detail::cost},
                                                 {"heads", lab_detail::heads},
                                                 {"positions", lab_detail::positions},
                                                 {"causal", lab_detail::causal}}};

}  // namespace

const std::vector<std::string>& lab_experiments() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const auto& e : kExperiments) n.emplace_back(e.name);
    return n;
  }();
  return names;
}

LabReport run_lab_experiment(const std::string& name, const LabOptions& opt) {
  const auto it = std::find_if(kExperiments.begin(), kExperiments.end(), [&](const Experiment& e) { return name == e.name; });
  if (it == kExperiments.end()) {
    std::string valid;
    for (const auto& n : lab_experiments()) valid += (valid.empty() ? "" : ", ") + n;
    throw UsageError("lab: unknown experiment '" + name + "'. Valid options: " + valid + ", all");
  }
  const double t0 = monotonic_s();
  LabReport rep = it->run(opt);
  rep.seconds = monotonic_s() - t0;
  lab_detail::write_report(opt, rep);
  write_lab_index(opt);
  spdlog::info("lab {}: {} ({:.1f} min)", name, opt.out + "/" + name + "/index.html", rep.seconds / 60);
  return rep;
}

void write_lab_index(const LabOptions& opt) {
  std::ostringstream h;
  h << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>attnmt lab</title><style>"
    << lab_detail::kPageStyle
    << "</style></head><body>\n<h1>attnmt lab</h1>\n<p>Each claim of the lesson as an experiment on the shipped corpus "
       "(<code>attnmt lab NAME</code>). The findings below are computed from each experiment's figures.</p>\n";
  int shown = 0;
  for (const auto& name : lab_experiments()) {
    const std::string file = opt.out + "/" + name + "/lab.json";
    if (!fs::is_regular_file(file)) {
      h << "<h2>" << name << "</h2>\n<p class=\"claim\">Not run yet: <code>attnmt lab " << name << "</code>.</p>\n";
      continue;
    }
    const json j = read_json_file(file);
    h << "<h2><a href=\"" << name << "/index.html\">" << xml_escape(j.value("title", name)) << "</a></h2>\n<p class=\"claim\">The claim: "
      << xml_escape(j.value("claim", "")) << "</p>\n<p class=\"finding\">" << xml_escape(j.value("finding", "")) << "</p>\n";
    ++shown;
  }
  h << "<p>" << shown << " of " << lab_experiments().size() << " experiments run.</p>\n</body></html>\n";
  make_dirs(opt.out);
  write_file_atomic(opt.out + "/index.html", h.str());
}

}  // namespace attnmt
