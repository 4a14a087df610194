// Shared test helpers: temporary directories, file writing, running the CLI, shared corpora.
#pragma once
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "common/config.h"
#include "data/toy_corpus.h"

namespace attnmt::test {

inline std::string temp_dir(const std::string& name) {
  auto dir = std::filesystem::path(testing::TempDir()) / ("attnmt_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
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

struct CliResult {
  int code = -1;
  std::string output;  // stdout and stderr together
};

// Runs the attnmt binary with the given arguments (a shell-quoted string).
inline CliResult run_cli(const std::string& args, const std::string& stdin_file = "") {
  std::string out = testing::TempDir() + "/attnmt_cli_out_" + std::to_string(::getpid()) + ".txt";
  std::string cmd = std::string(ATTNMT_BIN) + " " + args + (stdin_file.empty() ? " </dev/null" : " <" + stdin_file) +
                    " >" + out + " 2>&1";
  int rc = std::system(cmd.c_str());
  CliResult r;
  r.code = WIFEXITED(rc) ? WEXITSTATUS(rc) : 128 + WTERMSIG(rc);
  r.output = read_file(out);
  return r;
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
  c.data.train = {corpus + "/train.en", corpus + "/train.fr", "", ""};
  c.data.valid = {corpus + "/valid.en", corpus + "/valid.fr", "", ""};
  c.data.test = {corpus + "/test.en", corpus + "/test.fr", "", corpus + "/test.align"};
  c.data.tokenizer = "space";
  c.model.embed_dim = 8;
  c.model.hidden_dim = 16;
  c.model.attention.type = attention;
  return c;
}

}  // namespace attnmt::test
