// attnmt translate --run DIR [--beam K] [--nbest N] [--alignment hard|soft] [--format text|tsv|jsonl]
//                  [--input F] [--output F] [--checkpoint best|last|FILE]
// Streams: lines are translated in batches as they arrive and each batch is flushed at once.
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "commands.h"
#include "common/config.h"
#include "common/errors.h"
#include "common/progress.h"
#include "translate/alignment.h"
#include "translate/translator.h"

namespace attnmt::cli {

namespace {

struct OutputFormat {
  std::string format = "text";  // text | tsv | jsonl
  std::string alignment;        // "" | hard | soft
  double threshold = 0;         // hard: every link above it instead of the argmax (0 = argmax)
  int nbest = 1;
};

std::string soft_text(const std::vector<std::vector<float>>& rows) {
  std::string out;
  char buf[32];
  for (size_t j = 0; j < rows.size(); ++j) {
    if (j) out += " ";
    for (size_t i = 0; i < rows[j].size(); ++i) {
      std::snprintf(buf, sizeof(buf), "%s%.4g", i ? "," : "", static_cast<double>(rows[j][i]));
      out += buf;
    }
  }
  return out;
}

// One input line's output in the chosen format (lines end with \n).
std::string format_result(int64_t index, const std::string& src, const std::vector<Translation>& hyps, const OutputFormat& f) {
  auto align_text = [&](const Translation& t) {
    if (f.alignment == "hard") return pharaoh(alignment_of(t, f.threshold));
    if (f.alignment == "soft") return soft_text(token_weights(t));
    return std::string();
  };
  std::string out;
  if (f.format == "jsonl") {
    nlohmann::json j = {{"src", src}, {"hyps", nlohmann::json::array()}};
    for (const auto& t : hyps) {
      nlohmann::json h = {{"text", t.text}, {"tokens", t.tgt_tokens}, {"score", t.score}, {"logprob", t.logprob}};
      if (f.alignment == "hard") {
        nlohmann::json pairs = nlohmann::json::array();
        for (const auto& [i, jj] : alignment_of(t, f.threshold)) pairs.push_back({i, jj});
        h["alignment"] = pairs;
      } else if (f.alignment == "soft") {
        h["alignment"] = token_weights(t);
      }
      j["hyps"].push_back(h);
    }
    return j.dump() + "\n";
  }
  for (const auto& t : hyps) {
    if (f.format == "tsv") {
      out += t.text + "\t" + align_text(t) + "\n";
    } else if (f.nbest > 1) {  // Moses n-best: input index ||| text ||| score ||| log-probability [||| alignment]
      char sc[64];
      std::snprintf(sc, sizeof(sc), "%.6f ||| %.6f", t.score, t.logprob);
      out += std::to_string(index) + " ||| " + t.text + " ||| " + sc + (f.alignment.empty() ? "" : " ||| " + align_text(t)) + "\n";
    } else {
      out += t.text + (f.alignment.empty() ? "" : " ||| " + align_text(t)) + "\n";
    }
  }
  return out;
}

}  // namespace

namespace {
// Line reader over a file descriptor that can tell whether more input is ready without blocking. Reading is linear in
// the input: each byte is searched for a newline once. A line longer than kMaxLineBytes is refused (UsageError naming
// the input and the line) rather than held in memory.
class LineReader {
 public:
  static constexpr size_t kMaxLineBytes = size_t{1} << 20;

  LineReader(int fd, std::string name) : fd_(fd), name_(std::move(name)) {}
  // (A byte-order mark at the start of the input is removed, as every file reader does.)
  // Next line if one is complete in the buffer, or (blocking) after reading more; false at EOF.
  bool next(std::string& line) {
    for (;;) {
      const size_t nl = find_newline();
      if (nl != std::string::npos) {
        take(line, nl);
        pos_ = nl + 1;
        scanned_ = pos_;
        if (!line.empty() && line.back() == '\r') line.pop_back();
        return true;
      }
      if (eof_) {
        if (pos_ >= buf_.size()) return false;
        take(line, buf_.size());
        pos_ = scanned_ = buf_.size();
        return true;
      }
      if (buf_.size() - pos_ > kMaxLineBytes) too_long();
      fill();
    }
  }
  // True when a line can be returned without waiting.
  bool ready() {
    if (find_newline() != std::string::npos || eof_) return true;
    pollfd p{fd_, POLLIN, 0};
    return ::poll(&p, 1, 0) > 0;
  }

 private:
  // The next newline at or after pos_; the bytes searched are not searched again.
  size_t find_newline() {
    const size_t nl = buf_.find('\n', scanned_);
    scanned_ = nl == std::string::npos ? buf_.size() : nl;
    return nl;
  }
  [[noreturn]] void too_long() const {
    throw UsageError(name_ + ":" + std::to_string(lines_ + 1) + ": a line longer than " +
                     std::to_string(kMaxLineBytes >> 20) + " MiB (translate's limit of one input line)");
  }
  void take(std::string& line, size_t end) {
    if (end - pos_ > kMaxLineBytes) too_long();
    line.assign(buf_, pos_, end - pos_);
    if (lines_ == 0) strip_bom(line);
    ++lines_;
  }
  void fill() {
    if (pos_ > 0) {
      buf_.erase(0, pos_);
      scanned_ -= pos_;
      pos_ = 0;
    }
    char tmp[65536];
    ssize_t n = ::read(fd_, tmp, sizeof(tmp));
    if (n <= 0) {
      eof_ = true;
      return;
    }
    buf_.append(tmp, static_cast<size_t>(n));
  }
  int fd_;
  std::string name_;   // for errors: the file, or stdin
  std::string buf_;
  size_t pos_ = 0;      // start of the next line in buf_
  size_t scanned_ = 0;  // buf_[pos_, scanned_) holds no newline
  bool eof_ = false;
  int64_t lines_ = 0;   // lines returned
};

struct TranslateOptions {
  std::string run;                  // run directory
  int beam = 0;                     // 0 = the config's eval.beam_size
  double length_penalty = -1;       // < 0: the config's eval.length_penalty
  std::string input, output;        // files; stdin/stdout when empty
  std::string checkpoint = "best";  // best | last | a checkpoint file
  OutputFormat fmt;
};

void add_translate_options(CLI::App* app, TranslateOptions& o) {
  app->add_option("--run,-r", o.run, "Run directory")->required();
  app->add_option("--beam", o.beam, "Beam size (default: the run's " + config_key(defaults(), &defaults().eval.beam_size) + ")")->check(CLI::Range(1, 100));
  app->add_option("--length-penalty", o.length_penalty, "GNMT length penalty alpha (default: the run's " +
                  config_key(defaults(), &defaults().eval.length_penalty) + ")")->check(CLI::Range(0.0, 5.0));
  app->add_option("--input,-i", o.input, "Input file (default: stdin)");
  app->add_option("--output,-o", o.output, "Output file (default: stdout)");
  app->add_option("--checkpoint", o.checkpoint, "best | last | a checkpoint file of this run's model (e.g. from `attnmt average`)")
      ->capture_default_str();
  app->add_option("--nbest", o.fmt.nbest, "Hypotheses per input line, best first (at most the beam size)")
      ->capture_default_str()
      ->check(CLI::Range(1, 100));
  auto* alignment = app->add_option("--alignment", o.fmt.alignment,
                  "Word alignment from the attention that produced each hypothesis: hard (Pharaoh i-j, source-target, "
                  "0-based: the most attended source token per target token) or soft (the weights, one row per target "
                  "token). Multi-head attention: the mean over heads")
      ->check(CLI::IsMember({"hard", "soft"}));
  app->add_option("--alignment-threshold", o.fmt.threshold,
                  "hard: every source token whose weight exceeds this, instead of the most attended one")
      ->check(CLI::Range(0.0, 1.0))
      ->needs(alignment);
  app->add_option("--format", o.fmt.format,
                  "text: one line per hypothesis (with --nbest > 1: index ||| text ||| score ||| log-probability; an "
                  "alignment follows ' ||| '); tsv: translation<TAB>alignment; jsonl: {src, hyps: [{text, tokens, "
                  "score, logprob, alignment}]} per input line")
      ->capture_default_str()
      ->check(CLI::IsMember({"text", "tsv", "jsonl"}));
}

// The search the options ask for, checked against the run (n-best within the beam, alignments need attention).
SearchOptions translate_search(const LoadedRun& run, const TranslateOptions& o) {
  SearchOptions so = search_options(run.cfg.eval, o.beam, o.length_penalty);
  if (o.fmt.nbest > so.beam_size)
    throw UsageError("--nbest " + std::to_string(o.fmt.nbest) + " exceeds the beam size " + std::to_string(so.beam_size) +
                     " (a beam search keeps at most that many hypotheses); raise --beam");
  if (!o.fmt.alignment.empty() && !run.model->decoder->has_attention())
    throw UsageError(o.run + ": --alignment: attention type 'none' has no attention weights to align with");
  so.nbest = o.fmt.nbest;
  so.keep_weights = !o.fmt.alignment.empty();
  return so;
}

// Translates every line READER gives, in batches of the run's eval.batch_size (sooner when the input pauses), to OUT.
// Returns the number of lines.
int64_t translate_stream(LoadedRun& run, const SearchOptions& so, const TranslateOptions& o, LineReader& reader,
                         std::ostream& out, ProgressLine* progress) {
  const Translator translator(run, so);
  std::vector<std::string> pending;
  std::string line;
  int64_t count = 0;
  auto flush = [&]() {
    if (pending.empty()) return;
    for (size_t i = 0; i < pending.size(); ++i) {  // refused as train refuses them (data/text.cpp: read_lines)
      const std::string where =
          (o.input.empty() ? std::string("stdin") : o.input) + ":" + std::to_string(count + static_cast<int64_t>(i) + 1);
      if (pending[i].find('\0') != std::string::npos) throw UsageError(where + ": contains a NUL byte (binary file?)");
      if (find_invalid_utf8(pending[i]) != std::string::npos) throw UsageError(where + ": invalid UTF-8");
    }
    auto results = translator.nbest(pending);
    if (so.keep_weights && run.tok.subword())  // alignments between words, not pieces
      for (auto& hyps : results)
        for (auto& t : hyps) t = word_level(run.tok, t);
    for (size_t i = 0; i < results.size(); ++i)
      out << format_result(count + static_cast<int64_t>(i), pending[i], results[i], o.fmt);
    out.flush();
    count += static_cast<int64_t>(pending.size());
    if (progress) progress->update(count);
    pending.clear();
  };
  while (reader.next(line)) {
    pending.push_back(line);
    if (static_cast<int>(pending.size()) >= run.cfg.eval.batch_size || !reader.ready()) flush();
  }
  flush();
  return count;
}

int run_translate(const TranslateOptions& o, const GlobalOptions& g) {
  if (o.fmt.threshold > 0 && o.fmt.alignment != "hard") throw UsageError("--alignment-threshold applies to --alignment hard only");
  std::error_code ec;
  if (!o.output.empty() && std::filesystem::is_directory(o.output, ec))
    throw UsageError(o.output + ": is a directory; --output names the file to write");
  LoadedRun run = load_run(o.run, o.checkpoint, g.device);
  const SearchOptions so = translate_search(run, o);
  int fd = 0;
  if (!o.input.empty()) {
    fd = ::open(o.input.c_str(), O_RDONLY);
    if (fd < 0) throw UsageError(o.input + ": cannot open file");
  }
  std::string tmp_out = o.output.empty() ? "" : o.output + ".tmp." + std::to_string(::getpid());
  std::ofstream file;
  if (!tmp_out.empty()) {
    file.open(tmp_out, std::ios::binary | std::ios::trunc);
    if (!file) throw UsageError(o.output + ": cannot open for writing");
  }
  std::ostream& out = tmp_out.empty() ? std::cout : file;
  LineReader reader(fd, o.input.empty() ? std::string("stdin") : o.input);
  std::unique_ptr<ProgressLine> progress;  // a file's size is known: show progress and time left on a terminal
  if (fd != 0) progress = std::make_unique<ProgressLine>("translating", static_cast<int64_t>(count_lines(o.input)));
  int64_t count = 0;
  try {
    count = translate_stream(run, so, o, reader, out, progress.get());
  } catch (...) {
    if (!tmp_out.empty()) std::remove(tmp_out.c_str());
    throw;
  }
  if (fd != 0) ::close(fd);
  if (!tmp_out.empty()) {
    file.close();
    if (!file || std::rename(tmp_out.c_str(), o.output.c_str()) != 0) {
      std::remove(tmp_out.c_str());
      throw Error(o.output + ": cannot write output");
    }
  }
  spdlog::info("translated {} lines", count);
  return 0;
}

}  // namespace

Command setup_translate(CLI::App& parent, const GlobalOptions& g) {
  auto opt = std::make_shared<TranslateOptions>();
  auto* app = parent.add_subcommand("translate", "Translate lines from a file or stdin with a trained run");
  add_translate_options(app, *opt);
  return {app, [opt, &g]() -> int { return run_translate(*opt, g); }};
}

}  // namespace attnmt::cli
