#include "data/tokenizer.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>

#include "common/errors.h"

extern char** environ;

namespace attnmt {

// The SentencePiece library runs in a helper process, attnmt-spm (apps/spm/attnmt_spm.cpp says why:
// its private protobuf copy and LibTorch's cannot share a process). This is the client side.
namespace {

constexpr char kSep = '\x1f';  // between pieces on the pipe

#if __has_include("attnmt_build_config.h")  // CMake's; the fuzz build compiles this file without it
#include "attnmt_build_config.h"
#endif
#ifndef ATTNMT_SPM_HELPER_BUILT
#define ATTNMT_SPM_HELPER_BUILT "attnmt-spm"  // looked up in PATH
#endif

std::string& helper_override() {
  static std::string path;
  return path;
}

std::string helper_path() {
  if (!helper_override().empty()) return helper_override();
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const auto beside = self.parent_path() / "attnmt-spm";
    if (std::filesystem::is_regular_file(beside, ec)) return beside.string();
  }
  return ATTNMT_SPM_HELPER_BUILT;  // where the build put it
}

// write() that reports a dead reader as false instead of letting SIGPIPE end attnmt.
bool write_all(int fd, const char* p, size_t n) {
  sigset_t pipe_set, old;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
  bool ok = true;
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      ok = false;
      break;
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  if (!ok) {  // consume the SIGPIPE this thread may have raised before unblocking
    const timespec zero{0, 0};
    sigtimedwait(&pipe_set, nullptr, &zero);
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  return ok;
}

}  // namespace

// A child process with its stdin, stdout and stderr on pipes. In a named namespace, not the anonymous one: SpmServer
// (declared in tokenizer.h) holds one, and a class with external linkage must not hold a type that has none.
namespace spm_detail {

class Child {
 public:
  explicit Child(const std::vector<std::string>& args) {
    int in[2], out[2], err[2];
    if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0)
      throw Error(std::string("cannot create pipes for the SentencePiece helper: ") + std::strerror(errno));
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    posix_spawn_file_actions_adddup2(&fa, err[1], 2);
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    const int rc = posix_spawnp(&pid_, args[0].c_str(), &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    ::close(in[0]);
    ::close(out[1]);
    ::close(err[1]);
    in_ = in[1];
    out_ = out[0];
    err_ = err[0];
    if (rc != 0) {
      close_all();
      throw Error("cannot start the SentencePiece helper " + args[0] + ": " + std::strerror(rc) +
                  " (built beside attnmt; set ATTNMT_SPM_HELPER to its path)");
    }
  }
  ~Child() {
    close_all();
    if (pid_ > 0) {
      int status = 0;
      while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
      }
    }
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  bool send(const std::string& data) { return in_ >= 0 && write_all(in_, data.data(), data.size()); }
  void close_input() {
    if (in_ >= 0) ::close(in_);
    in_ = -1;
  }
  // One line of stdout (without '\n'); false at end of output.
  bool read_line(std::string& line) {
    for (;;) {
      const size_t nl = buf_.find('\n', pos_);
      if (nl != std::string::npos) {
        line.assign(buf_, pos_, nl - pos_);
        pos_ = nl + 1;
        if (pos_ > 65536) {
          buf_.erase(0, pos_);
          pos_ = 0;
        }
        return true;
      }
      char tmp[65536];
      const ssize_t n = ::read(out_, tmp, sizeof(tmp));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      buf_.append(tmp, static_cast<size_t>(n));
    }
  }
  // Everything left on stdout and stderr (read together, so neither pipe can fill up), then the exit code.
  int finish(std::string& out, std::string& err) {
    close_input();
    pollfd fds[2] = {{out_, POLLIN, 0}, {err_, POLLIN, 0}};
    std::string* dst[2] = {&out, &err};
    int open_fds = 2;
    while (open_fds > 0) {
      if (::poll(fds, 2, -1) < 0) {
        if (errno == EINTR) continue;
        break;
      }
      for (int k = 0; k < 2; ++k) {
        if (fds[k].fd < 0 || !(fds[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        char tmp[65536];
        const ssize_t n = ::read(fds[k].fd, tmp, sizeof(tmp));
        if (n > 0) {
          dst[k]->append(tmp, static_cast<size_t>(n));
        } else if (n == 0 || errno != EINTR) {
          fds[k].fd = -1;
          --open_fds;
        }
      }
    }
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  }

 private:
  void close_all() {
    for (int* fd : {&in_, &out_, &err_})
      if (*fd >= 0) {
        ::close(*fd);
        *fd = -1;
      }
  }
  pid_t pid_ = -1;
  int in_ = -1, out_ = -1, err_ = -1;
  std::string buf_;
  size_t pos_ = 0;
};

}  // namespace spm_detail

void set_spm_helper_path(const std::string& path) { helper_override() = path; }

// A running helper holding a source and a target model; one request at a time.
class SpmServer {
 public:
  // src_name/tgt_name name the models in an error (a file path, or empty for the helper's own words).
  SpmServer(const std::string& src, const std::string& tgt, const std::string& src_name, const std::string& tgt_name)
      : child_({helper_path(), "serve"}) {
    std::string answer;
    if (!child_.send(std::to_string(src.size()) + " " + std::to_string(tgt.size()) + "\n" + src + tgt) ||
        !child_.read_line(answer))
      throw Error("the SentencePiece helper " + helper_path() + " stopped while loading the models");
    if (answer == "ok") return;
    // The helper answers "!source model: ..." or "!target model: ..." for a model it cannot load.
    const std::string& name = answer.rfind("!source", 0) == 0 ? src_name : tgt_name;
    if (!name.empty()) throw UsageError(name + ": not a SentencePiece model");
    throw UsageError(answer.empty() ? std::string("SentencePiece model refused") : answer.substr(1));
  }
  std::string request(char op, Side side, std::string_view payload) {
    std::lock_guard<std::mutex> lock(mu_);
    std::string req;
    req.reserve(payload.size() + 4);
    req += op;
    req += side == Side::kSource ? 's' : 't';
    req += '\t';
    for (char c : payload) req += (c == '\n' || c == '\r') ? ' ' : c;
    req += '\n';
    std::string answer;
    if (!child_.send(req) || !child_.read_line(answer)) throw Error("the SentencePiece helper stopped unexpectedly");
    if (!answer.empty() && answer[0] == '!') throw UsageError("SentencePiece: " + answer.substr(1));
    return answer;
  }

 private:
  spm_detail::Child child_;
  std::mutex mu_;
};

namespace {

std::vector<std::string> split_pieces(const std::string& s) {
  std::vector<std::string> out;
  if (s.empty()) return out;
  size_t start = 0;
  for (;;) {
    const size_t end = s.find(kSep, start);
    out.push_back(s.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return out;
}

bool starts_word(const std::string& piece) { return piece.compare(0, kWordStart.size(), kWordStart) == 0; }

}  // namespace

Tokenizer::Tokenizer() = default;

Tokenizer::Tokenizer(TokenizerKind kind, bool lowercase) : kind_(kind), lowercase_(lowercase) {}

Tokenizer Tokenizer::pieces(const std::string& src_model_bytes, const std::string& tgt_model_bytes, bool lowercase,
                            const std::string& src_name, const std::string& tgt_name) {
  Tokenizer t(TokenizerKind::kSpace, lowercase);
  t.spm_ = std::make_shared<SpmServer>(src_model_bytes, tgt_model_bytes, src_name, tgt_name);
  return t;
}

Tokenizer Tokenizer::from_config(const DataConfig& data, const std::string& src, const std::string& tgt) {
  if (data.tokenizer != "sentencepiece") return Tokenizer(tokenizer_from_string(data.tokenizer), data.lowercase);
  // One helper loads both models; a file it refuses is named in the error.
  return pieces(read_sentencepiece_model(src), read_sentencepiece_model(tgt), data.lowercase, src, tgt);
}

std::vector<std::string> Tokenizer::encode(std::string_view line, Side side) const {
  if (!subword()) return tokenize(line, kind_, lowercase_);
  return split_pieces(spm_->request('e', side, lowercase_ ? std::string_view(to_lower_utf8(line)) : line));
}

std::string Tokenizer::decode(const std::vector<std::string>& tokens, Side side) const {
  if (!subword()) return detokenize(tokens, kind_);
  // Decoded in runs between "<unk>" tokens, so that an unknown token stays visible as "<unk>".
  std::string out;
  std::vector<std::string> run;
  auto flush = [&]() {
    if (run.empty()) return;
    std::string joined;
    for (size_t i = 0; i < run.size(); ++i) {
      if (i) joined += kSep;
      joined += run[i];
    }
    const std::string text = spm_->request('d', side, joined);
    if (!out.empty() && starts_word(run.front())) out.push_back(' ');
    out += text;
    run.clear();
  };
  for (const auto& t : tokens) {
    if (t == "<unk>") {
      flush();
      if (!out.empty()) out.push_back(' ');
      out += t;
    } else {
      run.push_back(t);
    }
  }
  flush();
  const size_t first = out.find_first_not_of(' '), last = out.find_last_not_of(' ');
  return first == std::string::npos ? std::string() : out.substr(first, last - first + 1);
}

std::vector<std::string> Tokenizer::words(std::string_view line) const {
  if (!subword()) return tokenize(line, kind_, lowercase_);
  if (!lowercase_) return split_whitespace(line);
  const std::string lower = to_lower_utf8(line);
  return split_whitespace(lower);
}

std::vector<int> Tokenizer::word_index(const std::vector<std::string>& tokens) const {
  std::vector<int> w(tokens.size());
  int word = -1;
  for (size_t i = 0; i < tokens.size(); ++i) {
    bool starts = starts_word(tokens[i]);
    // A lone marker with no word after it (a hypothesis may end on one) adds no word: it belongs to the last.
    if (starts && tokens[i].size() == kWordStart.size() && (i + 1 == tokens.size() || starts_word(tokens[i + 1]))) starts = false;
    if (!subword() || word < 0 || starts) ++word;
    w[i] = word;
  }
  return w;
}

std::vector<std::string> Tokenizer::join_words(const std::vector<std::string>& tokens) const {
  if (!subword()) return tokens;
  std::vector<std::string> out;
  const std::vector<int> w = word_index(tokens);
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (static_cast<size_t>(w[i]) == out.size()) out.emplace_back();
    out.back() += starts_word(tokens[i]) ? tokens[i].substr(kWordStart.size()) : tokens[i];
  }
  return out;
}

std::string train_sentencepiece(const std::vector<std::string>& lines, const SpmTrainOptions& opt, const std::string& what) {
  std::ostringstream cov;
  cov << opt.character_coverage;
  spm_detail::Child child({helper_path(), "train", std::to_string(opt.vocab_size), opt.model_type, cov.str()});
  std::string text;
  for (const auto& l : lines) {
    text += l;
    text += '\n';
  }
  // The helper reads all its input before it writes anything, so writing first cannot dead-lock.
  const bool sent = child.send(text);
  std::string model, err;
  const int rc = child.finish(model, err);
  if (rc == 2) throw UsageError(what + ": " + first_line(err));
  if (!sent || rc != 0 || model.empty())
    throw Error("the SentencePiece helper failed (exit " + std::to_string(rc) + ")" + (err.empty() ? "" : ": " + first_line(err)));
  return model;
}

std::string read_sentencepiece_model(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError(path + ": cannot open SentencePiece model");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::vector<float>> word_level_map(const std::vector<std::vector<float>>& weights,
                                               const std::vector<int>& src_word, const std::vector<int>& tgt_word) {
  const int n_src = src_word.empty() ? 0 : src_word.back() + 1;
  const int n_tgt = tgt_word.empty() ? 0 : tgt_word.back() + 1;
  std::vector<std::vector<float>> out(static_cast<size_t>(n_tgt), std::vector<float>(static_cast<size_t>(n_src), 0.f));
  std::vector<int> rows_of(static_cast<size_t>(n_tgt), 0);
  for (size_t r = 0; r < weights.size(); ++r) {
    if (weights[r].size() != src_word.size())
      throw std::invalid_argument("word_level_map: row " + std::to_string(r) + " has " + std::to_string(weights[r].size()) +
                                  " columns, the source has " + std::to_string(src_word.size()) + " tokens");
    std::vector<float> row(static_cast<size_t>(n_src), 0.f);
    for (size_t c = 0; c < src_word.size(); ++c) row[static_cast<size_t>(src_word[c])] += weights[r][c];
    if (r < tgt_word.size()) {
      const size_t w = static_cast<size_t>(tgt_word[r]);
      for (size_t c = 0; c < row.size(); ++c) out[w][c] += row[c];
      ++rows_of[w];
    } else {
      out.push_back(std::move(row));
    }
  }
  for (size_t w = 0; w < rows_of.size(); ++w)
    if (rows_of[w] > 1)
      for (float& x : out[w]) x /= static_cast<float>(rows_of[w]);
  return out;
}

}  // namespace attnmt
