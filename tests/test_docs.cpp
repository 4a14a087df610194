// The documentation's links: every relative link in README.md, docs/, configs/, data/ and src/ names a file of the
// repository, and every #anchor a heading of the page it points to (GitHub's slugs).
#include <gtest/gtest.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "support.h"

namespace attnmt::test {
namespace {

namespace fs = std::filesystem;

std::vector<fs::path> markdown_files() {
  const fs::path root = source_dir();
  std::vector<fs::path> files = {root / "README.md"};
  for (const char* dir : {"docs", "configs", "data", "src"}) {
    if (!fs::is_directory(root / dir)) continue;
    for (const auto& e : fs::recursive_directory_iterator(root / dir))
      if (e.is_regular_file() && e.path().extension() == ".md") files.push_back(e.path());
  }
  return files;
}

// GitHub's anchor of a heading: lowercase, punctuation dropped (hyphens and underscores kept), spaces to hyphens.
std::string slug(const std::string& heading) {
  std::string s;
  for (unsigned char c : heading) {
    if (std::isalnum(c) || c == '-' || c == '_' || c >= 0x80)
      s += static_cast<char>(std::tolower(c));
    else if (c == ' ')
      s += '-';
  }
  return s;
}

std::set<std::string> anchors(const fs::path& page) {
  std::set<std::string> out;
  std::istringstream in(read_file(page.string()));
  bool fenced = false;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("```", 0) == 0) fenced = !fenced;
    if (fenced || line.empty() || line[0] != '#') continue;
    const auto text = line.find_first_not_of('#');
    if (text != std::string::npos) out.insert(slug(line.substr(line.find_first_not_of(' ', text))));
  }
  return out;
}

TEST(Docs, EveryLinkResolves) {
  const auto files = markdown_files();
  ASSERT_GE(files.size(), 5u) << "README.md and the pages under docs/ should be found";
  const std::regex link(R"(\]\(([^)\s]+)\))");
  int checked = 0;
  for (const auto& f : files) {
    const std::string text = read_file(f.string());
    for (auto it = std::sregex_iterator(text.begin(), text.end(), link); it != std::sregex_iterator(); ++it) {
      const std::string target = (*it)[1];
      if (target.rfind("http://", 0) == 0 || target.rfind("https://", 0) == 0 || target.rfind("mailto:", 0) == 0) continue;
      const auto hash = target.find('#');
      const std::string path = target.substr(0, hash), anchor = hash == std::string::npos ? "" : target.substr(hash + 1);
      const fs::path resolved = path.empty() ? f : (f.parent_path() / path).lexically_normal();
      ++checked;
      if (!fs::exists(resolved)) {
        ADD_FAILURE() << f.string() << ": link to " << target << ": no such file";
        continue;
      }
      if (!anchor.empty() && resolved.extension() == ".md") {
        EXPECT_TRUE(anchors(resolved).count(anchor)) << f.string() << ": link to " << target << ": no heading with that anchor";
      }
    }
  }
  EXPECT_GT(checked, 10) << "the documentation's links were not found";
}

}  // namespace
}  // namespace attnmt::test

namespace attnmt::test {
namespace {

// docs/equations.md quotes the lines of src/model/ that compute each equation, in blocks opened by "```cpp FILE": every
// quoted line must still be a line of FILE, so that the page cannot drift from the code it explains.
TEST(Docs, EquationLinesAreTheCode) {
  const fs::path root = source_dir();
  std::ifstream page(root / "docs" / "equations.md");
  ASSERT_TRUE(page) << "docs/equations.md is missing";
  std::string line, file;
  std::set<std::string> lines_of_file;
  int blocks = 0, quoted = 0;
  while (std::getline(page, line)) {
    if (file.empty() && line.rfind("```cpp ", 0) == 0) {
      file = line.substr(7);
      std::ifstream src(root / file);
      ASSERT_TRUE(src) << "docs/equations.md quotes " << file << ", which does not exist";
      lines_of_file.clear();
      for (std::string l; std::getline(src, l);) lines_of_file.insert(l);
      ++blocks;
    } else if (!file.empty() && line.rfind("```", 0) == 0) {
      file.clear();
    } else if (!file.empty() && !line.empty()) {
      ++quoted;
      EXPECT_TRUE(lines_of_file.count(line)) << "docs/equations.md quotes a line that is not in " << file << ":\n" << line;
    }
  }
  EXPECT_TRUE(file.empty()) << "an unclosed code block in docs/equations.md";
  EXPECT_GE(blocks, 8);
  EXPECT_GE(quoted, 20);
}

}  // namespace
}  // namespace attnmt::test
