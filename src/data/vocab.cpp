#include "data/vocab.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "common/errors.h"
#include "common/fs.h"
#include "data/text.h"

namespace attnmt {

const std::vector<std::string>& Vocab::specials() {
  static const std::vector<std::string> s = {"<pad>", "<unk>", "<bos>", "<eos>"};
  return s;
}

Vocab::Vocab() {
  for (const auto& s : specials()) add(s);
}

void Vocab::add(const std::string& token) {
  stoi_.emplace(token, static_cast<int64_t>(itos_.size()));
  itos_.push_back(token);
}

Vocab Vocab::build(const std::vector<std::vector<std::string>>& sentences, int min_freq, int max_size) {
  std::unordered_map<std::string, int64_t> counts;
  for (const auto& s : sentences)
    for (const auto& t : s) ++counts[t];
  std::vector<std::pair<std::string, int64_t>> items;
  items.reserve(counts.size());
  for (auto& kv : counts) {
    if (kv.second < min_freq) continue;
    if (std::find(specials().begin(), specials().end(), kv.first) != specials().end()) continue;
    items.emplace_back(kv.first, kv.second);
  }
  std::sort(items.begin(), items.end(), [](const auto& a, const auto& b) {
    if (a.second != b.second) return a.second > b.second;
    return a.first < b.first;
  });
  if (max_size > 0 && static_cast<int64_t>(items.size()) > max_size) items.resize(static_cast<size_t>(max_size));
  Vocab v;
  for (const auto& kv : items) v.add(kv.first);
  return v;
}

void Vocab::save(const std::string& path) const {
  std::string text;
  for (const auto& t : itos_) text += t + "\n";
  write_file_atomic(path, text);
}

Vocab Vocab::load(const std::string& path) {
  std::vector<std::string> lines = read_lines(path);
  if (lines.size() < specials().size())
    throw UsageError(path + ": not a vocabulary file (fewer lines than the " + std::to_string(specials().size()) +
                     " special tokens)");
  Vocab v;
  for (size_t i = 0; i < specials().size(); ++i)
    if (lines[i] != specials()[i])
      throw UsageError(path + ":" + std::to_string(i + 1) + ": expected special token '" + specials()[i] + "', got '" +
                       lines[i] + "'");
  for (size_t i = specials().size(); i < lines.size(); ++i) {
    const std::string& t = lines[i];
    if (t.empty()) throw UsageError(path + ":" + std::to_string(i + 1) + ": empty token");
    if (split_whitespace(t).size() != 1 || split_whitespace(t)[0] != t)
      throw UsageError(path + ":" + std::to_string(i + 1) + ": token contains whitespace");
    if (v.stoi_.count(t)) throw UsageError(path + ":" + std::to_string(i + 1) + ": duplicate token '" + t + "'");
    v.add(t);
  }
  return v;
}

int64_t Vocab::id(const std::string& token) const {
  auto it = stoi_.find(token);
  return it == stoi_.end() ? kUnk : it->second;
}

const std::string& Vocab::token(int64_t id) const {
  if (id < 0 || id >= size()) throw std::out_of_range("vocabulary id " + std::to_string(id) + " out of range");
  return itos_[static_cast<size_t>(id)];
}

std::vector<int64_t> Vocab::encode(const std::vector<std::string>& tokens) const {
  std::vector<int64_t> ids;
  ids.reserve(tokens.size());
  for (const auto& t : tokens) ids.push_back(id(t));
  return ids;
}

std::vector<std::string> Vocab::decode(const std::vector<int64_t>& ids) const {
  std::vector<std::string> out;
  for (int64_t i : ids) {
    if (i == kEos) break;
    if (i == kPad || i == kBos) continue;
    out.push_back(token(i));
  }
  return out;
}

}  // namespace attnmt
