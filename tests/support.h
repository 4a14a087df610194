// Shared test helpers: temporary directories, file writing, running the CLI, shared corpora.
#pragma once
#include <fcntl.h>
#include <ftw.h>
#include <spawn.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/config.h"
#include "data/toy_corpus.h"

namespace attnmt::test {

// Removes a file, or a folder with everything in it; nothing when it is not there. Not std::filesystem::remove_all:
// PyPI's LibTorch exports a copy of the C++ library's filesystem functions from libtorch.so, which code linked against
// it binds to (pytorch/pytorch#133437), and on the GPU machine (torch 2.11.0+cu130) that remove_all called a null
// pointer. Layers.NoCodeCallsStdFilesystemRemoveAll keeps it out.
inline void remove_tree(const std::filesystem::path& p) {
  ::nftw(p.c_str(), [](const char* f, const struct stat*, int, struct FTW*) { return ::remove(f); }, 16,
         FTW_DEPTH | FTW_PHYS);
}

// Paths this test process created under the temporary directory; removed after the last test (set
// ATTNMT_KEEP_TEST_FILES=1 to keep them for a look) by the global environment in tests/support.cpp, inside
// RUN_ALL_TESTS: not among the destructors that run at exit, where, on the GPU machine with PyPI's LibTorch 2.11,
// std::filesystem::remove_all (bound to the copy libtorch.so exports) called a null pointer. Forked children leave
// with _exit and never remove anything.
struct TempPaths {
  pid_t owner = ::getpid();
  std::vector<std::filesystem::path> paths;
  void remove_all() {
    if (::getpid() != owner || std::getenv("ATTNMT_KEEP_TEST_FILES")) return;
    for (const auto& p : paths) remove_tree(p);
    paths.clear();
  }
};
inline TempPaths& temp_paths() {
  static TempPaths registry;
  return registry;
}

inline std::string temp_dir(const std::string& name) {
  auto dir = std::filesystem::path(testing::TempDir()) / ("attnmt_" + name + "_" + std::to_string(::getpid()));
  remove_tree(dir);
  std::filesystem::create_directories(dir);
  temp_paths().paths.push_back(dir);
  return dir.string();
}

inline std::string write_file(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// A run directory's metrics.jsonl, one JSON object per validation.
inline std::vector<nlohmann::json> read_metrics(const std::string& run_dir) {
  std::vector<nlohmann::json> out;
  std::istringstream in(read_file(run_dir + "/metrics.jsonl"));
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

struct CliResult {
  int code = -1;
  std::string output;  // stdout and stderr together
};

// The tests check CPU behaviour: every command they run says --device cpu unless it names a device itself, so that
// on a machine with a GPU they neither train on it nor ask one GPU for several ranks.
inline bool names_device(const std::string& args) { return args.find("--device") != std::string::npos; }

// Runs the attnmt binary with the given arguments (a shell-quoted string); env: "NAME=VALUE ..." entries
// added to its environment.
inline CliResult run_cli(const std::string& args, const std::string& stdin_file = "", const std::string& env = "") {
  static const std::string out = [] {
    std::string path = testing::TempDir() + "/attnmt_cli_out_" + std::to_string(::getpid()) + ".txt";
    temp_paths().paths.push_back(path);
    return path;
  }();
  std::string cmd = (env.empty() ? "" : "env " + env + " ") + std::string(ATTNMT_BIN) + (names_device(args) ? " " : " --device cpu ") + args + (stdin_file.empty() ? " </dev/null" : " <" + stdin_file) +
                    " >" + out + " 2>&1";
  int rc = std::system(cmd.c_str());
  CliResult r;
  r.code = WIFEXITED(rc) ? WEXITSTATUS(rc) : 128 + WTERMSIG(rc);
  r.output = read_file(out);
  return r;
}

// Starts attnmt with the given arguments (and extra NAME=VALUE environment entries), stdout and stderr
// appended to log; returns the pid, or -1.
inline pid_t spawn_cli(const std::vector<std::string>& args, const std::string& log,
                       const std::vector<std::string>& extra_env = {}) {
  std::vector<std::string> all = {ATTNMT_BIN};
  bool device = false;
  for (const auto& a : args) device = device || names_device(a);
  if (!device) all.insert(all.end(), {"--device", "cpu"});
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_strings(extra_env);
  for (char** e = environ; *e; ++e) env_strings.push_back(*e);  // earlier entries win for getenv
  std::vector<char*> envp;
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  return rc == 0 ? pid : -1;
}

inline std::string source_dir() { return ATTNMT_SOURCE_DIR; }

// ../shared/data next to the checkout, or "" (the caller skips with a message).
inline std::string shared_data_dir() {
  auto p = std::filesystem::path(ATTNMT_SOURCE_DIR).parent_path() / "shared" / "data";
  return std::filesystem::is_directory(p) ? p.string() : std::string();
}

// A small toy corpus (train/valid/test with gold alignments) in a fresh temporary directory.
inline std::string tiny_toy_corpus(const std::string& name, int train, int valid, int test, int max_len) {
  std::string dir = temp_dir(name);
  ToyCorpusOptions o;
  o.train = train;
  o.valid = valid;
  o.test = test;
  o.max_len = max_len;
  write_toy_corpus(dir, o);
  return dir;
}

// A tiny model config over a toy corpus directory (space tokenizer, embed 8, hidden 16).
inline Config tiny_config_for(const std::string& corpus, const std::string& run_dir, const std::string& attention) {
  Config c;
  c.run_dir = run_dir;
  c.device = "cpu";
  c.data.train = {corpus + "/train.en", corpus + "/train.fr", "", ""};
  c.data.valid = {corpus + "/valid.en", corpus + "/valid.fr", "", ""};
  c.data.test = {corpus + "/test.en", corpus + "/test.fr", "", corpus + "/test.align"};
  c.data.tokenizer = "space";
  c.model.embed_dim = 8;
  c.model.hidden_dim = 16;
  c.model.attention.type = attention_type_from_string(attention);
  return c;
}

// The same with self-attention encoder and decoder: two layers each, `heads` heads in every attention.
inline Config tiny_self_attention_config_for(const std::string& corpus, const std::string& run_dir, int heads) {
  Config c = tiny_config_for(corpus, run_dir, "scaled_dot");
  c.model.encoder.type = c.model.decoder.type = LayerType::kSelfAttention;
  c.model.encoder.heads = c.model.decoder.heads = c.model.attention.heads = heads;
  c.model.encoder_layers = c.model.decoder_layers = 2;
  return c;
}

// The lines of a text (a command's output), without their newlines.
std::vector<std::string> output_lines(const std::string& text);

// A trained tiny Bahdanau run (toy corpus of 64 pairs, one epoch, beam 3, buckets 5/10/15), shared by the tests that
// translate, evaluate or draw with a trained model: trained once per test binary run (tests/support.cpp).
const std::string& tiny_run();

// A trained tiny run without attention, and its corpus, shared by the tests that refuse it.
struct NoneRun {
  std::string corpus, dir;
};
const NoneRun& tiny_none_run();

// Exact resume, as every trainer checks it: config(dir) trained to `steps` in one go in one directory, and to `stop_at`
// then resumed (train --resume) to `steps` in another. run trains a config (resume: from its last.pt); by default
// attnmt::train on the CPU. Both runs' metrics.jsonl records are returned for expect_same_trajectory.
struct Trajectories {
  std::string straight_dir, resumed_dir;  // the two run directories
  std::vector<nlohmann::json> straight, resumed;
};
Trajectories train_straight_and_resumed(const std::string& name, const std::function<Config(const std::string& dir)>& config,
                                        int64_t stop_at, int64_t steps,
                                        const std::function<void(const Config&, bool resume)>& run = {});
// The resumed run logged what the straight one did, to the last digit: the same steps and the same `keys` at each
// validation (at least min_records of them).
void expect_same_trajectory(const Trajectories& t, size_t min_records,
                            const std::vector<std::string>& keys = {"train_loss", "valid_loss"});

}  // namespace attnmt::test
