// One writer per run directory: DirLock itself, and `train` holding its run directory against a second writer
// (train, train --resume, --overwrite, average --out) while readers (evaluate, translate, serve) go on, until it is killed.
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "support.h"
#include "common/errors.h"
#include "common/fs.h"
#include "serve/http.h"

namespace attnmt::test {
namespace {

namespace fs = std::filesystem;

TEST(DirLock, ASecondHolderIsRefusedWithThePidUntilTheFirstLetsGo) {
  const std::string dir = temp_dir("dirlock") + "/run";
  {
    DirLock a = DirLock::acquire(dir, true);
    ASSERT_TRUE(a.held());
    EXPECT_TRUE(fs::is_directory(dir));
    EXPECT_NE(DirLock::holder(dir).find("pid " + std::to_string(::getpid())), std::string::npos) << DirLock::holder(dir);
    // flock conflicts between open file descriptions, in this process as in another.
    try {
      DirLock b = DirLock::acquire(dir, false);
      ADD_FAILURE() << "a second lock was granted";
    } catch (const UsageError& e) {
      std::string m = e.what();
      EXPECT_NE(m.find("in use by pid " + std::to_string(::getpid())), std::string::npos) << m;
      EXPECT_EQ(m.find('\n'), std::string::npos) << "one line: " << m;
    }
  }
  // The first one made the directory and nothing was written there: it is gone with the lock.
  EXPECT_FALSE(fs::exists(dir));
  make_dirs(dir);
  write_file(dir + "/config.json", "{}");
  {
    DirLock a = DirLock::acquire(dir, false);
    DirLock moved = std::move(a);
    EXPECT_FALSE(a.held());
    EXPECT_TRUE(moved.held());
    EXPECT_THROW(DirLock::acquire(dir, false), UsageError);
  }
  DirLock again = DirLock::acquire(dir, false);  // released by the destructor
  EXPECT_TRUE(again.held());
  EXPECT_TRUE(fs::is_regular_file(dir + "/config.json"));  // a directory it did not make stays
  EXPECT_THROW(DirLock::acquire(dir + "/missing", false), UsageError);
}

// A forked child that holds the lock and is then killed: the kernel releases it.
TEST(DirLock, AKilledHolderLeavesItFree) {
  const std::string dir = temp_dir("dirlock_kill");
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    try {
      DirLock l = DirLock::acquire(dir, false);
      char c = 1;
      if (::write(ready[1], &c, 1) != 1) _exit(3);
      for (;;) ::pause();
    } catch (...) {
      _exit(4);
    }
  }
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  EXPECT_THROW(DirLock::acquire(dir, false), UsageError);
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_NO_THROW(DirLock::acquire(dir, false));
  ::close(ready[0]);
  ::close(ready[1]);
}

// Steps of metrics.jsonl in file order.
std::vector<int64_t> logged_steps(const std::string& run) {
  std::vector<int64_t> steps;
  for (const auto& j : read_metrics(run)) steps.push_back(j["step"].get<int64_t>());
  return steps;
}

TEST(RunLock, ASecondWriterIsRefusedWhileTrainingRunsAndReadersGoOn) {
  std::string corpus = tiny_toy_corpus("runlock", 160, 12, 8, 12);
  std::string run = corpus + "/run";
  Config c = tiny_config_for(corpus, run, "bahdanau");
  c.train.batch_size = 8;
  c.train.valid_every = 5;
  c.train.epochs = 100000;  // runs until killed
  c.train.early_stopping.patience = 0;
  write_file(corpus + "/long.json", config_to_json(c).dump(2));
  const std::string log = corpus + "/train.log.txt";
  pid_t pid = spawn_cli({"--log-level", "warn", "train", "-c", corpus + "/long.json"}, log);
  ASSERT_GT(pid, 0);
  // Wait for a checkpoint and two validations.
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while ((!fs::exists(run + "/last.pt") || logged_steps(run).size() < 2) && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_TRUE(fs::exists(run + "/last.pt")) << read_file(log);
  const std::string holder = "in use by pid " + std::to_string(pid);

  CliResult resume = run_cli("train -c " + corpus + "/long.json --resume");
  EXPECT_EQ(resume.code, 2) << resume.output;
  EXPECT_NE(resume.output.find(holder), std::string::npos) << resume.output;
  CliResult overwrite = run_cli("train -c " + corpus + "/long.json --overwrite");
  EXPECT_EQ(overwrite.code, 2) << overwrite.output;
  EXPECT_NE(overwrite.output.find(holder), std::string::npos) << overwrite.output;
  CliResult fresh = run_cli("train -c " + corpus + "/long.json");  // refused for the lock, before "already holds a run"
  EXPECT_EQ(fresh.code, 2) << fresh.output;
  EXPECT_NE(fresh.output.find(holder), std::string::npos) << fresh.output;
  CliResult avg = run_cli("average --run " + run + " --checkpoints " + run + "/last.pt " + run + "/best.pt --out " + run + "/avg.pt");
  EXPECT_EQ(avg.code, 2) << avg.output;
  EXPECT_NE(avg.output.find(holder), std::string::npos) << avg.output;
  EXPECT_FALSE(fs::exists(run + "/avg.pt"));
  // Readers go on.
  CliResult eval = run_cli("evaluate --run " + run + " --checkpoint last");
  EXPECT_EQ(eval.code, 0) << eval.output;
  CliResult tr = run_cli("translate --run " + run + " --checkpoint last", corpus + "/test.en");
  EXPECT_EQ(tr.code, 0) << tr.output;
  if (http_available()) {  // and a server of the run answers while it trains
    const std::string slog = corpus + "/serve.log";
    pid_t spid = spawn_cli({"serve", "--run", run, "--checkpoint", "last", "--port", "0"}, slog);
    int port = 0;
    for (int i = 0; i < 1200 && port == 0; ++i) {
      std::string text = read_file(slog);
      auto at = text.find("on http://127.0.0.1:");
      if (at != std::string::npos) port = std::atoi(text.c_str() + at + 20);
      else std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ASSERT_GT(port, 0) << read_file(slog);
    HttpResult r = http_request("127.0.0.1", port, "POST", "/translator/translate", "[{\"src\": \"a b c\"}]");
    EXPECT_EQ(r.status, 200) << r.body;
    ::kill(spid, SIGTERM);
    int st = 0;
    ::waitpid(spid, &st, 0);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << read_file(slog);
  }

  ::kill(pid, SIGKILL);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status));
  // The refused writers touched nothing: the killed run's metrics are one increasing sequence.
  std::vector<int64_t> steps = logged_steps(run);
  ASSERT_GE(steps.size(), 2u);
  for (size_t i = 1; i < steps.size(); ++i) EXPECT_LT(steps[i - 1], steps[i]) << "line " << i + 1;
  // The lock went with the process: the run resumes, and its metrics stay one increasing sequence.
  CliResult resumed = run_cli("--log-level warn train -c " + corpus + "/long.json --resume --set train.max_steps=" +
                              std::to_string(steps.back() + 10));
  EXPECT_EQ(resumed.code, 0) << resumed.output;
  steps = logged_steps(run);
  ASSERT_GE(steps.size(), 3u);
  for (size_t i = 1; i < steps.size(); ++i) EXPECT_LT(steps[i - 1], steps[i]) << "line " << i + 1;
  CliResult avg2 = run_cli("average --run " + run + " --checkpoints " + run + "/last.pt " + run + "/best.pt --out " + run + "/avg.pt");
  EXPECT_EQ(avg2.code, 0) << avg2.output;
}

}  // namespace
}  // namespace attnmt::test
