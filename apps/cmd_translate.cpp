// attnmt translate --run DIR [--beam K] [--input F] [--output F] [--checkpoint best|last]
// Streams: lines are translated in batches as they arrive and each batch is flushed at once.
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>

#include <spdlog/spdlog.h>

#include "commands.h"
#include "common/config.h"
#include "common/errors.h"
#include "eval/evaluator.h"

namespace attnmt::cli {

namespace {
const Config kDefaults;
}  // namespace

namespace {
// Line reader over a file descriptor that can tell whether more input is ready without blocking.
class LineReader {
 public:
  explicit LineReader(int fd) : fd_(fd) {}
  // Next line if one is complete in the buffer, or (blocking) after reading more; false at EOF.
  bool next(std::string& line) {
    for (;;) {
      size_t nl = buf_.find('\n', pos_);
      if (nl != std::string::npos) {
        line = buf_.substr(pos_, nl - pos_);
        pos_ = nl + 1;
        if (!line.empty() && line.back() == '\r') line.pop_back();
        return true;
      }
      if (eof_) {
        if (pos_ < buf_.size()) {
          line = buf_.substr(pos_);
          pos_ = buf_.size();
          return true;
        }
        return false;
      }
      fill();
    }
  }
  // True when a line can be returned without waiting.
  bool ready() {
    if (buf_.find('\n', pos_) != std::string::npos || eof_) return true;
    pollfd p{fd_, POLLIN, 0};
    return ::poll(&p, 1, 0) > 0;
  }

 private:
  void fill() {
    if (pos_ > 0) {
      buf_.erase(0, pos_);
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
  std::string buf_;
  size_t pos_ = 0;
  bool eof_ = false;
};
}  // namespace

Command setup_translate(CLI::App& parent, const GlobalOptions& g) {
  struct Options {
    std::string run;                  // run directory
    int beam = 0;                     // 0 = the config's eval.beam_size
    std::string input, output;        // files; stdin/stdout when empty
    std::string checkpoint = "best";  // best | last
  };
  auto opt = std::make_shared<Options>();
  auto* app = parent.add_subcommand("translate", "Translate lines from a file or stdin with a trained run");
  app->add_option("--run,-r", opt->run, "Run directory")->required();
  app->add_option("--beam", opt->beam, "Beam size (default: the run's " + config_key(kDefaults, &kDefaults.eval.beam_size) + ")")->check(CLI::Range(1, 100));
  app->add_option("--input,-i", opt->input, "Input file (default: stdin)");
  app->add_option("--output,-o", opt->output, "Output file (default: stdout)");
  app->add_option("--checkpoint", opt->checkpoint, "best | last")->capture_default_str()->check(CLI::IsMember({"best", "last"}));
  return {app, [opt, &g]() -> int {
            LoadedRun run = load_run(opt->run, opt->checkpoint, g.device);
            int fd = 0;
            if (!opt->input.empty()) {
              fd = ::open(opt->input.c_str(), O_RDONLY);
              if (fd < 0) throw UsageError(opt->input + ": cannot open file");
            }
            std::string tmp_out = opt->output.empty() ? "" : opt->output + ".tmp." + std::to_string(::getpid());
            std::ofstream file;
            if (!tmp_out.empty()) {
              file.open(tmp_out, std::ios::binary | std::ios::trunc);
              if (!file) throw UsageError(opt->output + ": cannot open for writing");
            }
            std::ostream& out = tmp_out.empty() ? std::cout : file;
            SearchOptions so = search_options(run.cfg.eval, opt->beam);
            LineReader reader(fd);
            std::vector<std::string> pending;
            std::string line;
            int64_t count = 0;
            auto flush = [&]() {
              if (pending.empty()) return;
              for (size_t i = 0; i < pending.size(); ++i)
                if (find_invalid_utf8(pending[i]) != std::string::npos)
                  throw UsageError((opt->input.empty() ? std::string("stdin") : opt->input) + ":" +
                                   std::to_string(count + static_cast<int64_t>(i) + 1) + ": invalid UTF-8");
              for (const auto& t : translate_lines(run, pending, so, run.cfg.eval.batch_size)) out << t.text << "\n";
              out.flush();
              count += static_cast<int64_t>(pending.size());
              pending.clear();
            };
            try {
              while (reader.next(line)) {
                pending.push_back(line);
                if (static_cast<int>(pending.size()) >= run.cfg.eval.batch_size || !reader.ready()) flush();
              }
              flush();
            } catch (...) {
              if (!tmp_out.empty()) std::remove(tmp_out.c_str());
              throw;
            }
            if (fd != 0) ::close(fd);
            if (!tmp_out.empty()) {
              file.close();
              if (!file || std::rename(tmp_out.c_str(), opt->output.c_str()) != 0)
                throw Error(opt->output + ": cannot write output");
            }
            spdlog::info("translated {} lines", count);
            return 0;
          }};
}

}  // namespace attnmt::cli
