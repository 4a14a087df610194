// Checkpoints across LibTorch versions. CI builds attnmt twice, against Debian's LibTorch (1.13 on Debian 12) and
// against PyPI's (2.x, CUDA compiled in), and runs this suite in the second build with ATTNMT_OTHER_BUILD naming the
// first build's attnmt: a run trained by either resumes under the other. LibTorch 1.13 keys the optimizer's state by
// hexadecimal addresses and 2.x parses them as decimal ones, so before attnmt read that state itself, a 2.x build lost
// or mixed up the Adam moments of a 1.13 run.
#include <cmath>
#include <cstdlib>
#include <string>

#include <gtest/gtest.h>

#include "common/runtime.h"
#include "support.h"

namespace attnmt::cross_version_test {

// Runs one attnmt binary (on the CPU) with args; returns its exit code and fills out with what it printed.
int run_binary(const std::string& bin, const std::string& args, const std::string& log, std::string* out) {
  const std::string cmd = bin + " --device cpu " + args + " </dev/null >" + log + " 2>&1";
  const int rc = std::system(cmd.c_str());
  *out = test::read_file(log);
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128 + WTERMSIG(rc);
}

std::string write_config(const std::string& corpus, const std::string& dir, const std::string& run) {
  Config c = test::tiny_config_for(corpus, run, "bahdanau");
  c.model.dropout = 0.0;  // the two LibTorch versions draw dropout masks differently
  c.train.epochs = 1000;
  c.train.batch_size = 8;  // 50 steps an epoch: the 40 steps validate at 10, 20, 30 and 40 only
  c.train.valid_every = 10;
  c.train.max_steps = 40;
  c.train.log_every = 10;
  const std::string path = dir + "/" + std::filesystem::path(run).filename().string() + ".json";
  test::write_file(path, config_to_json(c).dump(2));
  return path;
}

// A run of 40 steps by `first` alone, against 20 steps by `first` resumed to 40 by `second`: the same validation
// figures. Here the two builds agree to 7 digits (docs/gpu.md); the tolerance leaves room for two BLAS libraries
// (OpenBLAS in Debian's LibTorch, MKL in PyPI's) rounding differently where the products go through them.
void expect_resume_across(const std::string& first, const std::string& second, const std::string& name) {
  const std::string dir = test::temp_dir("versions_" + name);
  const std::string corpus = test::tiny_toy_corpus("versions_corpus_" + name, 400, 40, 20, 8);
  const std::string whole_cfg = write_config(corpus, dir, dir + "/whole");
  const std::string split_cfg = write_config(corpus, dir, dir + "/split");
  std::string out;
  ASSERT_EQ(run_binary(first, "train -c " + whole_cfg, dir + "/whole.log", &out), 0) << out;
  ASSERT_EQ(run_binary(first, "train -c " + split_cfg + " --set train.max_steps=20", dir + "/split1.log", &out), 0) << out;
  ASSERT_EQ(run_binary(second, "train -c " + split_cfg + " --resume", dir + "/split2.log", &out), 0) << out;
  EXPECT_NE(out.find("resumed from"), std::string::npos) << out;
  EXPECT_EQ(out.find("dropout masks start afresh"), std::string::npos) << out;
  const auto whole = test::read_metrics(dir + "/whole"), split = test::read_metrics(dir + "/split");
  ASSERT_EQ(whole.size(), 4u);
  ASSERT_EQ(split.size(), whole.size());
  for (size_t i = 0; i < whole.size(); ++i) {
    EXPECT_EQ(split[i]["step"], whole[i]["step"]);
    const double a = whole[i]["valid_loss"].get<double>(), b = split[i]["valid_loss"].get<double>();
    EXPECT_NEAR(b, a, 1e-5 * std::abs(a)) << "validation " << i << " at step " << whole[i]["step"];
  }
}

std::string other_build() {
  const char* v = std::getenv("ATTNMT_OTHER_BUILD");
  return v ? v : "";
}

TEST(Versions, CheckpointsRecordTheLibTorchVersion) {
  const std::string dir = test::temp_dir("versions_record");
  const std::string corpus = test::tiny_toy_corpus("versions_record_corpus", 100, 20, 10, 6);
  const std::string cfg = write_config(corpus, dir, dir + "/run");
  std::string out;
  ASSERT_EQ(run_binary(ATTNMT_BIN, "train -c " + cfg + " --set train.max_steps=2", dir + "/log", &out), 0) << out;
  // The version is stored as a string in the archive's data.pkl; the zip keeps it uncompressed.
  const std::string ckpt = test::read_file(dir + "/run/last.pt");
  EXPECT_NE(ckpt.find("libtorch_version"), std::string::npos);
  EXPECT_NE(ckpt.find(libtorch_version()), std::string::npos) << libtorch_version();
  ASSERT_EQ(run_binary(ATTNMT_BIN, "--version", dir + "/v.log", &out), 0);
  EXPECT_NE(out.find(std::string("LibTorch ") + libtorch_version()), std::string::npos) << out;
}

TEST(Versions, ARunOfTheOtherBuildResumesHereAndTheOtherWayRound) {
  const std::string other = other_build();
  if (other.empty()) GTEST_SKIP() << "ATTNMT_OTHER_BUILD is not set (CI sets it to the Debian build's attnmt)";
  std::string out;
  ASSERT_EQ(run_binary(other, "--version", test::temp_dir("versions_other") + "/v.log", &out), 0) << out;
  ASSERT_EQ(out.find(std::string("LibTorch ") + libtorch_version() + " "), std::string::npos)
      << "ATTNMT_OTHER_BUILD is built with this build's LibTorch: " << out;
  std::cout << "[ other build ] " << out;
  expect_resume_across(other, ATTNMT_BIN, "other_then_this");
  expect_resume_across(ATTNMT_BIN, other, "this_then_other");
}

}  // namespace attnmt::cross_version_test
