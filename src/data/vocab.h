// Vocabulary: token <-> id, with the specials <pad> <unk> <bos> <eos> at ids 0..3.
#pragma once
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "data/special_tokens.h"

namespace attnmt {

class Vocab {
 public:
  static constexpr int64_t kPad = kPadId, kUnk = kUnkId, kBos = kBosId, kEos = kEosId;
  static const std::vector<std::string>& specials();

  Vocab();  // specials only

  // Builds from tokenized sentences: tokens seen at least min_freq times, at most max_size of them
  // (0 = no limit), ordered by frequency (descending) and then by byte order.
  static Vocab build(const std::vector<std::vector<std::string>>& sentences, int min_freq, int max_size);

  // One token per line, specials first. load() checks the format and throws UsageError naming the
  // file and line on any problem.
  void save(const std::string& path) const;
  static Vocab load(const std::string& path);

  int64_t size() const { return static_cast<int64_t>(itos_.size()); }
  int64_t id(const std::string& token) const;  // kUnk when unknown
  const std::string& token(int64_t id) const;  // throws std::out_of_range
  std::vector<int64_t> encode(const std::vector<std::string>& tokens) const;
  // Stops at <eos>, skips <pad>/<bos>; <unk> stays visible as "<unk>".
  std::vector<std::string> decode(const std::vector<int64_t>& ids) const;
  const std::vector<std::string>& tokens() const { return itos_; }

 private:
  void add(const std::string& token);
  std::vector<std::string> itos_;
  std::unordered_map<std::string, int64_t> stoi_;
};

}  // namespace attnmt
