// Fuzzes the vocabulary loader; a vocabulary that loads survives save and load unchanged.
#include "data/vocab.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace attnmt;
  std::string path = fuzz::scratch_file("vocab.txt");
  fuzz::write_bytes(path, data, size);
  try {
    Vocab v = Vocab::load(path);
    fuzz::check(v.size() >= 4, "specials present");
    for (int64_t i = 0; i < v.size(); ++i) fuzz::check(v.id(v.token(i)) == i, "id(token(i)) == i");
    std::string copy = fuzz::scratch_file("vocab_copy.txt");
    v.save(copy);
    fuzz::check(Vocab::load(copy).tokens() == v.tokens(), "save/load round trip");
  } catch (const UsageError&) {
  }
  return 0;
}
