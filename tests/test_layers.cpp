// The library's layers (README.md, Layout): each folder of src/ includes only itself and the folders below it, and the
// hand-written SIMD code and its thread pool live in src/kernels/ alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "support.h"

namespace attnmt::layers_test {

namespace fs = std::filesystem;

const std::vector<std::string> kLayers = {"common", "data", "kernels", "model", "viz", "eval", "train"};

std::vector<fs::path> sources(const fs::path& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file() && (e.path().extension() == ".cpp" || e.path().extension() == ".h")) out.push_back(e.path());
  return out;
}

TEST(Layers, EachIncludesOnlyItselfAndTheLayersBelowIt) {
  const fs::path src = fs::path(test::source_dir()) / "src";
  const std::regex include(R"re(^\s*#\s*include\s+"([a-z_]+)/)re");
  int files = 0, includes = 0;
  for (size_t level = 0; level < kLayers.size(); ++level) {
    ASSERT_TRUE(fs::is_directory(src / kLayers[level])) << kLayers[level];
    for (const auto& f : sources(src / kLayers[level])) {
      ++files;
      std::ifstream in(f);
      for (std::string line; std::getline(in, line);) {
        std::smatch m;
        if (!std::regex_search(line, m, include)) continue;
        ++includes;
        const auto it = std::find(kLayers.begin(), kLayers.end(), m[1].str());
        ASSERT_NE(it, kLayers.end()) << f << " includes an unknown folder: " << line;
        EXPECT_LE(static_cast<size_t>(it - kLayers.begin()), level) << f << " (" << kLayers[level] << ") includes a layer above it: " << line;
      }
    }
  }
  EXPECT_GT(files, 50);
  EXPECT_GT(includes, 100);
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

}  // namespace attnmt::layers_test
