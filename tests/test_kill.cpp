// Kill anywhere: a tiny training run is SIGKILLed at many random moments (checkpoint writes included) and
// resumed each time; after every kill last.pt and best.pt either load or are absent, metrics.jsonl has only
// whole lines. A file-size limit (ulimit -f) makes a checkpoint write fail like a full disk: training must
// stop with a clear error and leave the previous checkpoint as it was.
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <random>
#include <sstream>
#include <thread>

#include "support.h"
#include "data/vocab.h"
#include "run/loaded_run.h"
#include "run/run_dir.h"
#include "model/seq2seq.h"
#include "train/trainer.h"

namespace attnmt::test {
namespace {

namespace fs = std::filesystem;

// Loads a checkpoint ("last" or "best") the way evaluate and translate do: config, vocabularies, model.
void expect_loads(const std::string& run, const std::string& which) {
  SCOPED_TRACE(which);
  EXPECT_NO_THROW(load_run(run, which, "cpu"));
}

// Every line of metrics.jsonl is a whole JSON object ending in a newline; returns the steps in order.
std::vector<int64_t> metrics_steps(const std::string& path) {
  std::vector<int64_t> steps;
  std::string text = read_file(path);
  if (text.empty()) return steps;
  EXPECT_EQ(text.back(), '\n') << "torn last line in " << path;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    EXPECT_TRUE(j.is_object() && j.contains("step")) << "torn line: " << line;
    if (j.is_object() && j.contains("step")) steps.push_back(j["step"].get<int64_t>());
  }
  return steps;
}

bool has_temporaries(const std::string& dir) {
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().find(".tmp.") != std::string::npos) return true;
  return false;
}

TEST(KillAnywhere, CheckpointsSurviveSigkillAtRandomMoments) {
  std::string corpus = tiny_toy_corpus("kill", 160, 12, 4, 14);
  std::string run = corpus + "/run";
  Config c = tiny_config_for(corpus, run, "bahdanau");
  c.train.batch_size = 8;
  c.train.valid_every = 1;  // a validation and two checkpoint writes after every step
  c.train.epochs = 1000;
  c.train.early_stopping.patience = 0;
  c.train.keep_checkpoints = 2;  // and a third, ckpt-<step>.pt, of which at most two are kept
  write_file(corpus + "/kill.json", config_to_json(c).dump(2));
  const std::string log = corpus + "/kill.log";

  // Each checkpoint write pauses 40 ms after its first bytes, so that many kills land inside a write.
  ::setenv("ATTNMT_TEST_SLOW_CHECKPOINT_MS", "40", 1);
  std::mt19937 rng(20261129);
  const int kKills = 24;
  int killed_mid_write = 0, with_checkpoint = 0;
  // The first run is timed up to its first checkpoint (start-up is slower under sanitizers); later kills
  // fall anywhere from half that time to 1.2 s after it: start-up, steps, validations, checkpoint writes.
  auto t_start = std::chrono::steady_clock::now();
  int first_checkpoint_ms = 0;
  for (int k = 0; k < kKills; ++k) {
    SCOPED_TRACE("kill " + std::to_string(k + 1));
    bool resume = fs::exists(run + "/last.pt");
    pid_t pid = spawn_cli({"--log-level", "warn", "train", "-c", corpus + "/kill.json", resume ? "--resume" : "--overwrite"}, log);
    ASSERT_GT(pid, 0);
    if (k == 0) {
      t_start = std::chrono::steady_clock::now();
      while (!fs::exists(run + "/last.pt") && std::chrono::steady_clock::now() - t_start < std::chrono::seconds(120))
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      first_checkpoint_ms = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                                 std::chrono::steady_clock::now() - t_start).count());
      ASSERT_TRUE(fs::exists(run + "/last.pt")) << read_file(log);
    } else {
      std::uniform_int_distribution<int> delay_ms(first_checkpoint_ms / 2, first_checkpoint_ms + 1200);
      std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms(rng)));
    }
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "the run ended before the kill:\n" << read_file(log);
    if (!fs::is_directory(run)) continue;
    if (has_temporaries(run)) ++killed_mid_write;
    for (const char* which : {"last", "best"})
      if (fs::exists(run + "/" + which + ".pt")) expect_loads(run, which);
    if (fs::exists(run + "/last.pt")) ++with_checkpoint;
    const auto periodic = RunDir(run).periodic_checkpoints();
    EXPECT_LE(periodic.size(), 2u);
    for (const auto& p : periodic) expect_loads(run, p);
    metrics_steps(run + "/metrics.jsonl");
  }
  std::printf("kills: %d (first checkpoint after %d ms), with a checkpoint on disk: %d, during a write (temporary file left): %d\n",
              kKills, first_checkpoint_ms, with_checkpoint, killed_mid_write);
  ::unsetenv("ATTNMT_TEST_SLOW_CHECKPOINT_MS");
  ASSERT_GT(with_checkpoint, kKills / 2);
  EXPECT_GT(killed_mid_write, 0);

  // A last, uninterrupted resume runs two more steps and cleans up what the kills left.
  Config resumed = config_from_json(read_json_file(run + "/config.json"));
  TrainerState before;
  {
    Seq2Seq model(resumed.model, Vocab::load(run + "/src.vocab").size(), Vocab::load(run + "/tgt.vocab").size());
    before = load_checkpoint(run + "/last.pt", model, nullptr);
  }
  CliResult r = run_cli("--log-level warn train -c " + corpus + "/kill.json --resume --set train.max_steps=" +
                        std::to_string(before.step + 2));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_FALSE(has_temporaries(run));
  auto steps = metrics_steps(run + "/metrics.jsonl");
  ASSERT_GE(steps.size(), 2u);
  EXPECT_EQ(steps.back(), before.step + 2);
  const auto periodic = RunDir(run).periodic_checkpoints();
  ASSERT_EQ(periodic.size(), 2u);
  EXPECT_EQ(periodic.back(), RunDir(run).periodic_checkpoint(before.step + 2));
  for (size_t i = 1; i < steps.size(); ++i) EXPECT_LT(steps[i - 1], steps[i]) << "a validation repeated after a resume";
}

TEST(DiskFull, CheckpointWriteFailsClearlyAndKeepsThePreviousOne) {
  std::string corpus = tiny_toy_corpus("diskfull", 64, 6, 4, 12);
  std::string run = corpus + "/run";
  Config c = tiny_config_for(corpus, run, "bahdanau");
  c.train.batch_size = 16;
  c.train.max_steps = 2;
  c.train.snapshot_sentences = 0;  // the checkpoint is then the largest file a validation writes
  write_file(corpus + "/c.json", config_to_json(c).dump(2));
  ASSERT_EQ(run_cli("--log-level warn train -c " + corpus + "/c.json").code, 0);
  const std::string last = read_file(run + "/last.pt"), best = read_file(run + "/best.pt");
  ASSERT_GT(last.size(), 8192u);

  // A file-size limit of half a checkpoint (in 1024-byte blocks): config, logs and metrics still fit.
  std::string out = corpus + "/out.txt";
  std::string cmd = "ulimit -f " + std::to_string(last.size() / 2048) + "; exec " + std::string(ATTNMT_BIN) +
                    " --device cpu train -c " + corpus + "/c.json --resume --set train.max_steps=4 >" + out + " 2>&1";
  int rc = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(rc)) << "killed by a signal instead of failing cleanly:\n" << read_file(out);
  EXPECT_EQ(WEXITSTATUS(rc), 1) << read_file(out);
  std::string output = read_file(out);
  EXPECT_NE(output.find("cannot write checkpoint"), std::string::npos) << output;
  EXPECT_EQ(read_file(run + "/last.pt"), last);
  EXPECT_EQ(read_file(run + "/best.pt"), best);
  EXPECT_FALSE(has_temporaries(run));
  expect_loads(run, "last");
}

}  // namespace
}  // namespace attnmt::test
