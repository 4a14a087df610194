// attnmt-spm: the SentencePiece helper process of attnmt.
//
// Why a separate process: Debian's libsentencepiece carries its own copy of protobuf-lite 3.14 and
// exports its symbols, while LibTorch loads the system's libprotobuf 3.21. In one process the two
// copies bind to each other's functions and the program crashes while loading (or protobuf aborts on
// the version check). This helper links SentencePiece and nothing of LibTorch; attnmt talks to it over
// pipes (src/data/tokenizer.cpp).
//
//   attnmt-spm train VOCAB_SIZE MODEL_TYPE CHARACTER_COVERAGE
//       reads training lines on stdin; writes the serialized model on stdout; exit 2 with one line on
//       stderr when SentencePiece refuses.
//   attnmt-spm serve
//       reads "<bytes of source model> <bytes of target model>\n" and the two models, answers "ok" or
//       "!reason"; then one request per line, one answer per line:
//         e<s|t><TAB>text           -> pieces separated by \x1f
//         d<s|t><TAB>piece\x1fpiece -> text
//       an answer that starts with '!' is an error message.
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

constexpr char kSep = '\x1f';

std::string reason(const sentencepiece::util::Status& s) {
  std::string m = s.message();
  const size_t close = m.rfind("] ");
  if (close != std::string::npos) m = m.substr(close + 2);
  for (char& c : m)
    if (c == '\n') c = ' ';
  while (!m.empty() && m.back() == ' ') m.pop_back();
  return m.empty() ? "unknown error" : m;
}

class Lines : public sentencepiece::SentenceIterator {
 public:
  explicit Lines(const std::vector<std::string>& v) : v_(v) {}
  bool done() const override { return i_ >= v_.size(); }
  void Next() override { ++i_; }
  const std::string& value() const override { return v_[i_]; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  const std::vector<std::string>& v_;
  size_t i_ = 0;
};

int train(const std::string& vocab_size, const std::string& model_type, const std::string& coverage) {
  std::vector<std::string> lines;
  for (std::string l; std::getline(std::cin, l);) lines.push_back(std::move(l));
  Lines it(lines);
  std::string bytes;
  const std::unordered_map<std::string, std::string> args = {
      {"vocab_size", vocab_size},
      {"model_type", model_type},
      {"character_coverage", coverage},
      {"num_threads", "2"},
      {"minloglevel", "2"},                // no training log
      {"input_sentence_size", "0"},        // every line, no random sample: same lines, same model
      {"shuffle_input_sentence", "false"},
      {"unk_surface", "<unk>"},
  };
  const auto st = sentencepiece::SentencePieceTrainer::Train(args, &it, &bytes);
  if (!st.ok()) {
    std::cerr << reason(st) << "\n";
    return 2;
  }
  std::cout.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return std::cout.flush() ? 0 : 1;
}

// The two models (source, target) sent after a "SRC_BYTES TGT_BYTES" line. False when the stream ends early; a model
// that does not load is answered with "!..." and *ANSWERED set.
bool load_models(sentencepiece::SentencePieceProcessor (&sp)[2], bool* answered) {
  size_t n_src = 0, n_tgt = 0;
  std::string header;
  if (!std::getline(std::cin, header) || std::sscanf(header.c_str(), "%zu %zu", &n_src, &n_tgt) != 2) return false;
  std::string src(n_src, '\0'), tgt(n_tgt, '\0');
  if (!std::cin.read(&src[0], static_cast<std::streamsize>(n_src)) || !std::cin.read(&tgt[0], static_cast<std::streamsize>(n_tgt)))
    return false;
  for (int k = 0; k < 2; ++k) {
    const auto st = sp[k].LoadFromSerializedProto(k == 0 ? src : tgt);
    if (!st.ok() || sp[k].GetPieceSize() <= 0) {
      std::cout << "!" << (k == 0 ? "source" : "target") << " model: not a SentencePiece model (" << reason(st) << ")\n" << std::flush;
      *answered = true;
      return false;
    }
  }
  return true;
}

// PAYLOAD's pieces joined by kSep.
sentencepiece::util::Status encode(const sentencepiece::SentencePieceProcessor& p, const std::string& payload, std::string* out) {
  std::vector<std::string> pieces;
  const auto st = p.Encode(payload, &pieces);
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (i) out->push_back(kSep);
    *out += pieces[i];
  }
  return st;
}

// The text of PAYLOAD's kSep-separated pieces, on one line.
sentencepiece::util::Status decode(const sentencepiece::SentencePieceProcessor& p, const std::string& payload, std::string* out) {
  std::vector<std::string> pieces;
  size_t start = 0;
  while (start <= payload.size() && !payload.empty()) {
    const size_t end = payload.find(kSep, start);
    pieces.push_back(payload.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  const auto st = p.Decode(pieces, out);
  std::replace(out->begin(), out->end(), '\n', ' ');
  return st;
}

bool well_formed(const std::string& req) {
  return req.size() >= 3 && (req[0] == 'e' || req[0] == 'd') && (req[1] == 's' || req[1] == 't') && req[2] == '\t';
}

int serve() {
  sentencepiece::SentencePieceProcessor sp[2];
  bool answered = false;
  if (!load_models(sp, &answered)) return answered ? 0 : 1;
  std::cout << "ok\n" << std::flush;
  std::string out;
  for (std::string req; std::getline(std::cin, req);) {
    if (!well_formed(req)) {
      std::cout << "!malformed request\n" << std::flush;
      continue;
    }
    const auto& p = sp[req[1] == 's' ? 0 : 1];
    const std::string payload = req.substr(3);
    out.clear();
    const auto st = req[0] == 'e' ? encode(p, payload, &out) : decode(p, payload, &out);
    if (!st.ok()) out = "!" + reason(st);
    std::cout << out << '\n' << std::flush;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::ios::sync_with_stdio(false);
  // Ctrl-C reaches the whole process group: attnmt decides what happens (it may still need pieces while it
  // writes its last checkpoint and stops); this helper ends when attnmt closes the pipe.
  std::signal(SIGINT, SIG_IGN);
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "train" && argc == 5) return train(argv[2], argv[3], argv[4]);
  if (mode == "serve" && argc == 2) return serve();
  std::cerr << "attnmt-spm: the SentencePiece helper of attnmt, started by attnmt itself "
               "(usage: attnmt-spm train VOCAB_SIZE MODEL_TYPE COVERAGE | attnmt-spm serve)\n";
  return 2;
}
