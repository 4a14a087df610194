// The library's layers (README.md, Layout): each folder of src/ includes only itself and the folders below it, and the
// hand-written SIMD code and its thread pool live in src/kernels/ alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <string>
#include <vector>

#include "support.h"

namespace attnmt::layers_test {

namespace fs = std::filesystem;

// The intended order, lowest first: common -> data, kernels -> model -> viz -> run -> translate -> eval -> train ->
// serve, lab. Folders of one rank are peers: neither includes the other. Every folder under src/ has a rank here.
const std::vector<std::pair<std::string, int>> kLayers = {
    {"common", 0}, {"data", 1},      {"kernels", 1}, {"model", 2}, {"viz", 3},   {"run", 4},
    {"translate", 5}, {"eval", 6}, {"train", 7},   {"serve", 8}, {"lab", 8}};

int rank_of(const std::string& folder) {
  for (const auto& [name, rank] : kLayers)
    if (name == folder) return rank;
  return -1;
}

// Whether a file in folder `from` may include a header of folder `to`.
bool may_include(const std::string& from, const std::string& to) { return from == to || rank_of(to) < rank_of(from); }

std::vector<fs::path> sources(const fs::path& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file() && (e.path().extension() == ".cpp" || e.path().extension() == ".h")) out.push_back(e.path());
  return out;
}

TEST(Layers, TheRuleRefusesPeersAndHigherLayers) {
  EXPECT_TRUE(may_include("model", "kernels"));
  EXPECT_TRUE(may_include("lab", "train"));
  EXPECT_TRUE(may_include("serve", "serve"));
  EXPECT_FALSE(may_include("data", "kernels"));  // peers
  EXPECT_FALSE(may_include("lab", "serve"));
  EXPECT_FALSE(may_include("eval", "train"));  // above
  EXPECT_TRUE(may_include("eval", "translate"));   // evaluation translates
  EXPECT_TRUE(may_include("translate", "run"));    // translation starts from a loaded run
  EXPECT_FALSE(may_include("run", "translate"));
  EXPECT_FALSE(may_include("translate", "eval"));
  EXPECT_FALSE(may_include("common", "data"));
}

TEST(Layers, EachIncludesOnlyItselfAndTheLayersBelowIt) {
  const fs::path src = fs::path(test::source_dir()) / "src";
  const std::regex include(R"re(^\s*#\s*include\s+"([a-z_]+)/)re");
  int files = 0, includes = 0;
  size_t folders = 0;
  for (const auto& e : fs::directory_iterator(src)) {
    if (!e.is_directory()) continue;
    ++folders;
    const std::string from = e.path().filename().string();
    ASSERT_GE(rank_of(from), 0) << "src/" << from << " has no place in the layer order of tests/test_layers.cpp";
    for (const auto& f : sources(e.path())) {
      ++files;
      std::ifstream in(f);
      for (std::string line; std::getline(in, line);) {
        std::smatch m;
        if (!std::regex_search(line, m, include)) continue;
        ++includes;
        const std::string to = m[1].str();
        ASSERT_GE(rank_of(to), 0) << f << " includes an unknown folder: " << line;
        EXPECT_TRUE(may_include(from, to)) << f << " (" << from << ") includes a peer or a layer above it: " << line;
      }
    }
  }
  EXPECT_EQ(folders, kLayers.size());  // every layer of the list exists
  EXPECT_GT(files, 80);
  EXPECT_GT(includes, 150);
}

TEST(Layers, SimdLanesAndThreadPoolsOnlyInKernels) {
  const fs::path root = test::source_dir();
  const std::regex simd(R"(_mm512_|__m512|__m256|_mm256_|immintrin|vector_size *\(|__attribute__ *\(\(target|Lanes<|share_rows|run_shares|parallel_for)");
  int checked = 0, in_kernels = 0;
  for (const char* dir : {"src", "apps"})
    for (const auto& f : sources(root / dir)) {
      const bool kernels = f.parent_path().filename() == "kernels";
      std::ifstream in(f);
      int n = 0;
      for (std::string line; std::getline(in, line);) {
        if (!std::regex_search(line, simd)) continue;
        ++n;
        if (!kernels) ADD_FAILURE() << f << ": SIMD or thread-pool code outside src/kernels/: " << line;
      }
      ++checked;
      in_kernels += kernels ? n : 0;
    }
  EXPECT_GT(checked, 50);
  EXPECT_GT(in_kernels, 20);  // the pattern does find the kernels' own code
}

// An attention type is decided where the types are named (common/config.h, config.cpp) and beside the mechanisms'
// factory (model/attention.cpp: attention_traits, attention_macs); everything else asks those.
TEST(Layers, AttentionTypesAreDecidedInThreeFiles) {
  const fs::path root = test::source_dir();
  std::vector<std::string> deciding;
  int checked = 0;
  for (const char* dir : {"src", "apps"})
    for (const auto& f : sources(root / dir)) {
      std::ifstream in(f);
      const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      ++checked;
      if (text.find("AttentionType::k") != std::string::npos) deciding.push_back(fs::relative(f, root).string());
    }
  std::sort(deciding.begin(), deciding.end());
  EXPECT_GT(checked, 50);
  EXPECT_EQ(deciding, (std::vector<std::string>{"src/common/config.cpp", "src/common/config.h", "src/model/attention.cpp"}));
}

// std::filesystem::remove_all is not called anywhere (tests/support.h, remove_tree, says why): PyPI's LibTorch exports
// its own copy, which crashed on the GPU machine.
TEST(Layers, NoCodeCallsStdFilesystemRemoveAll) {
  const fs::path root = test::source_dir();
  const std::string call = std::string("remove_all") + "(";  // not spelled whole here, or this file would match
  int checked = 0;
  for (const char* dir : {"src", "apps", "tests"})
    for (const auto& f : sources(root / dir)) {
      std::ifstream in(f);
      int line_no = 0;
      for (std::string line; std::getline(in, line);) {
        ++line_no;
        if (line.find("filesystem::" + call) != std::string::npos || line.find("fs::" + call) != std::string::npos)
          ADD_FAILURE() << f << ":" << line_no << ": calls std::filesystem's remove_all: " << line;
      }
      ++checked;
    }
  EXPECT_GT(checked, 80);
}

// The library reads the environment in one place, common/runtime.cpp (env_var and the settings it derives), so that
// what an environment variable changes can be found there; the CLI (apps/) reads its own.
TEST(Layers, TheLibraryReadsTheEnvironmentInRuntimeOnly) {
  const fs::path src = fs::path(test::source_dir()) / "src";
  const std::string call = std::string("getenv") + "(";  // not spelled whole here
  int checked = 0;
  for (const auto& f : sources(src)) {
    if (f.filename() == "runtime.cpp" && f.parent_path().filename() == "common") continue;
    std::ifstream in(f);
    int line_no = 0;
    for (std::string line; std::getline(in, line);) {
      ++line_no;
      if (line.find(call) != std::string::npos) ADD_FAILURE() << f << ":" << line_no << ": reads the environment: " << line;
    }
    ++checked;
  }
  EXPECT_GT(checked, 80);
}

}  // namespace attnmt::layers_test
