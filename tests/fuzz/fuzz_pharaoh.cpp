// Fuzzes the Pharaoh alignment parser and the alignment file reader with range checks.
#include "data/corpus.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace attnmt;
  std::string text(reinterpret_cast<const char*>(data), size);
  std::string line = text.substr(0, text.find('\n'));
  try {
    Alignment a = parse_pharaoh(line, "fuzz:1");
    for (auto [i, j] : a) fuzz::check(i >= 0 && j >= 0, "indices are non-negative");
    fuzz::check(parse_pharaoh(format_pharaoh(a), "fuzz:1") == a, "format/parse round trip");
  } catch (const UsageError&) {
  }
  std::string path = fuzz::scratch_file("align.txt");
  fuzz::write_bytes(path, data, size);
  try {
    std::vector<Alignment> all = read_alignments(path);
    std::vector<size_t> lens(all.size(), 5);
    auto checked = read_alignments(path, &lens, &lens);
    fuzz::check(checked.size() == all.size(), "range-checked read keeps the line count");
    for (const auto& a : checked)
      for (auto [i, j] : a) fuzz::check(i < 5 && j < 5, "range check holds");
  } catch (const UsageError&) {
  }
  return 0;
}
