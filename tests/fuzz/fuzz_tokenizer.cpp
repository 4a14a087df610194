// Fuzzes the 13a tokenizer, the space tokenizer, lowercasing and the detokenizer on valid UTF-8
// (the readers reject anything else before it reaches them).
#include "data/text.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace attnmt;
  std::string_view s(reinterpret_cast<const char*>(data), size);
  if (find_invalid_utf8(s) != std::string::npos) return 0;
  for (bool lower : {false, true}) {
    for (TokenizerKind kind : {TokenizerKind::k13a, TokenizerKind::kSpace}) {
      auto toks = tokenize(s, kind, lower);
      for (const auto& t : toks) {
        fuzz::check(!t.empty(), "no empty tokens");
        fuzz::check(find_invalid_utf8(t) == std::string::npos, "tokens stay valid UTF-8");
      }
      std::string text = detokenize(toks, kind);
      fuzz::check(find_invalid_utf8(text) == std::string::npos, "detokenized text stays valid UTF-8");
      // Splitting the 13a string gives the tokens. (13a is not idempotent: "a,,,,5" -> "a , , , ,5" ->
      // "a , , , , 5", exactly as Python's re.sub does with sacreBLEU's regexes; the unit tests pin that.)
      if (kind == TokenizerKind::k13a && !lower) {
        std::string once = tokenize_13a_string(s);
        fuzz::check(split_whitespace(once) == toks, "13a string and token list agree");
        for (const auto& t : toks) fuzz::check(split_whitespace(t).size() == 1, "a token holds no whitespace");
      }
    }
  }
  std::string lowered = to_lower_utf8(s);
  fuzz::check(to_lower_utf8(lowered) == lowered, "lowercasing is idempotent");
  return 0;
}
