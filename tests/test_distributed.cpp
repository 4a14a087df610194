// Data-parallel training over c10d/Gloo on loopback: two ranks give the same weights as one process with the
// same global batch; a resumed two-rank run follows the same trajectory; a rank that dies or hangs makes the
// other exit with a clear error instead of waiting forever.
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <sstream>
#include <thread>

#include "support.h"
#include "common/errors.h"
#include "run/loaded_run.h"
#include "train/distributed.h"
#include "train/trainer.h"

namespace attnmt::test {
namespace {

namespace fs = std::filesystem;

const std::string& dist_corpus() {
  static std::string dir = tiny_toy_corpus("dist_corpus", 120, 12, 4, 16);
  return dir;
}

// A tiny config written to a file for the CLI. Batches of 16 do not split evenly over 3 ranks, and the
// last batch of an epoch (120 = 7 x 16 + 8) is smaller.
std::string write_config(const std::string& run, int max_steps, double dropout) {
  Config c = tiny_config_for(dist_corpus(), run, "bahdanau");
  c.model.dropout = dropout;
  c.train.batch_size = 16;
  c.train.max_steps = max_steps;
  c.train.valid_every = 4;
  c.train.seed = 5;
  c.train.epochs = 100;
  c.train.early_stopping.patience = 0;
  validate(c);
  std::string path = run + ".json";
  write_file(path, config_to_json(c).dump(2));
  return path;
}

// Largest absolute difference between the parameters of two runs' last checkpoints.
double max_param_diff(const std::string& a, const std::string& b) {
  LoadedRun ra = load_run(a, "last", "cpu"), rb = load_run(b, "last", "cpu");
  auto pa = ra.model->named_parameters(), pb = rb.model->named_parameters();
  EXPECT_EQ(pa.size(), pb.size());
  if (pa.size() != pb.size()) return 1e9;
  double worst = 0;
  for (size_t i = 0; i < pa.size(); ++i) {
    EXPECT_EQ(pa[i].key(), pb[i].key());
    worst = std::max(worst, (pa[i].value() - pb[i].value()).abs().max().item<double>());
  }
  return worst;
}

int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// Waits for pid up to limit; returns its exit code (128+signal), or -1 on timeout.
int wait_for(pid_t pid, std::chrono::seconds limit) {
  auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return -1;
}

#define SKIP_WITHOUT_C10D() \
  if (!distributed_available()) GTEST_SKIP() << "built without c10d/Gloo (libgloo-dev missing at configure time)"

}  // namespace

TEST(Distributed, ShardRowsCoverTheBatchInOrder) {
  std::vector<int64_t> rows = {9, 3, 7, 1, 5, 2, 8};
  for (int world : {1, 2, 3, 7, 9}) {
    std::vector<int64_t> joined;
    size_t smallest = rows.size(), largest = 0;
    for (int r = 0; r < world; ++r) {
      auto s = shard_rows(rows, r, world);
      smallest = std::min(smallest, s.size());
      largest = std::max(largest, s.size());
      joined.insert(joined.end(), s.begin(), s.end());
    }
    ASSERT_EQ(joined.size(), rows.size()) << world << " ranks";
    EXPECT_EQ(joined, rows) << world << " ranks";
    EXPECT_LE(largest - smallest, 1u) << world << " ranks";
  }
  EXPECT_TRUE(shard_rows(rows, 0, 9).empty());  // more ranks than rows: some get nothing
  EXPECT_THROW(shard_rows(rows, 2, 2), c10::Error);
}

TEST(Distributed, EnvironmentIsCheckedAndNamed) {
  struct Case {
    std::vector<std::pair<const char*, const char*>> env;
    std::string expect;  // "" = accepted
  };
  const std::vector<Case> cases = {
      {{}, ""},
      {{{"WORLD_SIZE", "2"}, {"RANK", "1"}, {"MASTER_PORT", "1234"}}, ""},
      {{{"WORLD_SIZE", "two"}}, "WORLD_SIZE"},
      {{{"WORLD_SIZE", "2"}, {"RANK", "2"}}, "RANK"},
      {{{"WORLD_SIZE", "2"}}, "RANK is not set"},
      {{{"WORLD_SIZE", "2"}, {"RANK", "0"}, {"MASTER_PORT", "70000"}}, "MASTER_PORT"},
      {{{"WORLD_SIZE", "2"}, {"RANK", "0"}, {"MASTER_ADDR", ""}}, "MASTER_ADDR"},
      {{{"WORLD_SIZE", "4"}, {"RANK", "0"}, {"LOCAL_WORLD_SIZE", "5"}}, "LOCAL_WORLD_SIZE"},
  };
  const char* names[] = {"WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"};
  for (const auto& c : cases) {
    for (const char* n : names) ::unsetenv(n);
    for (const auto& [k, v] : c.env) ::setenv(k, v, 1);
    if (c.expect.empty()) {
      EXPECT_NO_THROW(dist_spec_from_env());
    } else {
      try {
        dist_spec_from_env();
        ADD_FAILURE() << "accepted, expected an error about " << c.expect;
      } catch (const UsageError& e) {
        EXPECT_NE(std::string(e.what()).find(c.expect), std::string::npos) << e.what();
      }
    }
  }
  for (const char* n : names) ::unsetenv(n);
  DistSpec s = dist_spec_from_env();
  EXPECT_EQ(s.world, 1);
  EXPECT_EQ(s.rank, 0);
}

TEST(Distributed, TwoAndThreeRanksMatchOneProcess) {
  SKIP_WITHOUT_C10D();
  std::string base = temp_dir("dist_match");
  const int steps = 10;  // crosses the end of epoch 1 (8 batches, the last of 8 pairs)
  std::string one = base + "/one", two = base + "/two", three = base + "/three";
  auto r1 = run_cli("train -c " + write_config(one, steps, 0.0) + " --overwrite");
  ASSERT_EQ(r1.code, 0) << r1.output;
  auto r2 = run_cli("train -c " + write_config(two, steps, 0.0) + " --overwrite --nproc 2");
  ASSERT_EQ(r2.code, 0) << r2.output;
  auto r3 = run_cli("train -c " + write_config(three, steps, 0.0) + " --overwrite --nproc 3");
  ASSERT_EQ(r3.code, 0) << r3.output;
  EXPECT_NE(r2.output.find("data-parallel: rank 0 of 2 (gloo)"), std::string::npos) << r2.output;
  EXPECT_EQ(r2.output.find("[rank 1]"), std::string::npos) << "rank 1 logged more than warnings:\n" << r2.output;
  double d2 = max_param_diff(one, two), d3 = max_param_diff(one, three);
  std::printf("largest parameter difference after %d steps: 2 ranks %.3g, 3 ranks %.3g\n", steps, d2, d3);
  EXPECT_LT(d2, 1e-5);
  EXPECT_LT(d3, 1e-5);
  // Training did move the weights, so an equality of untouched models cannot pass for a match.
  std::string short_run = base + "/short";
  ASSERT_EQ(run_cli("train -c " + write_config(short_run, 2, 0.0) + " --overwrite").code, 0);
  EXPECT_GT(max_param_diff(one, short_run), 1e-3);
  // Only rank 0 wrote the run directory: one metrics line per validation, same steps as one process.
  size_t lines1 = 0, lines2 = 0;
  for (char ch : read_file(one + "/metrics.jsonl")) lines1 += ch == '\n';
  for (char ch : read_file(two + "/metrics.jsonl")) lines2 += ch == '\n';
  EXPECT_EQ(lines1, 3u);  // steps 4, 8, 10
  EXPECT_EQ(lines2, lines1);
}

TEST(Distributed, ResumedTwoRankRunFollowsTheSameTrajectory) {
  SKIP_WITHOUT_C10D();
  std::string base = temp_dir("dist_resume");
  std::string straight = base + "/straight", split = base + "/split";
  // Dropout on: each rank draws its own masks, so resuming must restore rank 1's generator too.
  ASSERT_EQ(run_cli("train -c " + write_config(straight, 10, 0.3) + " --overwrite --nproc 2").code, 0);
  auto first = run_cli("train -c " + write_config(split, 4, 0.3) + " --overwrite --nproc 2");
  ASSERT_EQ(first.code, 0) << first.output;
  auto second = run_cli("train -c " + write_config(split, 10, 0.3) + " --resume --nproc 2");
  ASSERT_EQ(second.code, 0) << second.output;
  EXPECT_EQ(second.output.find("no random state saved"), std::string::npos) << second.output;
  EXPECT_EQ(max_param_diff(straight, split), 0.0);
}

TEST(Distributed, DeadOrHungRankEndsTheOtherWithAClearError) {
  SKIP_WITHOUT_C10D();
  std::string base = temp_dir("dist_dead");
  for (int sig : {SIGKILL, SIGSTOP}) {
    SCOPED_TRACE(sig == SIGKILL ? "rank 1 killed" : "rank 1 stopped");
    std::string run = base + (sig == SIGKILL ? "/killed" : "/stopped");
    std::string cfg = write_config(run, 100000, 0.0);
    std::string port = std::to_string(free_port());
    std::string log0 = run + ".rank0.log", log1 = run + ".rank1.log";
    // Launched the way torchrun would (no --nproc parent that could clean up): only the timeout helps. The timeout
    // also bounds joining the group, so it leaves room for two processes starting at once on a loaded machine (under
    // ASan, with the other core busy, one rank started 6 s after the other and 4 s was too short).
    std::vector<std::string> args = {"--log-level", "info", "train", "-c", cfg, "--overwrite", "--dist-timeout", "12"};
    std::vector<std::string> common = {"WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + port};
    auto env0 = common, env1 = common;
    env0.push_back("RANK=0");
    env1.push_back("RANK=1");
    pid_t p0 = spawn_cli(args, log0, env0), p1 = spawn_cli(args, log1, env1);
    ASSERT_GT(p0, 0);
    ASSERT_GT(p1, 0);
    auto t0 = std::chrono::steady_clock::now();
    // The line is logged before the checkpoint's collective (every rank's random state): wait for last.pt too, or
    // a kill inside that window leaves no checkpoint (rightly: the collective fails) and the check below would race.
    auto saved = [&] { return read_file(log0).find("validation at step 4") != std::string::npos && fs::exists(run + "/last.pt"); };
    while (!saved() && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(60))
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ASSERT_TRUE(saved()) << read_file(log0) << read_file(log1);
    ::kill(p1, sig);
    auto killed_at = std::chrono::steady_clock::now();
    int code = wait_for(p0, std::chrono::seconds(40));
    double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count();
    ::kill(p1, SIGKILL);
    ::kill(p0, SIGKILL);
    ::waitpid(p1, nullptr, 0);
    if (code == -1) ::waitpid(p0, nullptr, 0);
    std::printf("%s: rank 0 exited with %d after %.1f s\n", sig == SIGKILL ? "killed" : "stopped", code, took);
    EXPECT_EQ(code, kExitFailure) << read_file(log0);
    std::string log = read_file(log0);
    EXPECT_NE(log.find("distributed: rank 0:"), std::string::npos) << log;
    EXPECT_NE(log.find("another rank exited or timed out"), std::string::npos) << log;
    EXPECT_EQ(log.find("terminate called"), std::string::npos) << log;
    EXPECT_TRUE(fs::exists(run + "/last.pt"));  // the last checkpoint is still there to resume from
  }
}

TEST(Distributed, FailingWorkerStopsTheLaunch) {
  SKIP_WITHOUT_C10D();
  std::string base = temp_dir("dist_fail");
  std::string run = base + "/run";
  std::string cfg = write_config(run, 2, 0.0);
  ASSERT_EQ(run_cli("train -c " + cfg + " --overwrite --nproc 2").code, 0);
  // The run exists: rank 0 refuses (exit 2, one line); the launcher stops rank 1 and passes the code on.
  auto again = run_cli("train -c " + cfg + " --nproc 2");
  EXPECT_EQ(again.code, kExitUsage) << again.output;
  EXPECT_NE(again.output.find("already holds a run"), std::string::npos) << again.output;
  auto both = run_cli("train -c " + cfg + " --nproc 2 --overwrite --resume");
  EXPECT_EQ(both.code, kExitUsage) << both.output;
  // A worker that crashes: its signal is passed on (rank 0 only reports the lost peer, exit 1).
  std::string long_cfg = write_config(base + "/long", 100000, 0.0);
  const std::string log = base + "/crash.log";
  pid_t launcher = spawn_cli({"train", "-c", long_cfg, "--overwrite", "--nproc", "2"}, log);
  ASSERT_GT(launcher, 0);
  pid_t rank1 = -1;
  auto t0 = std::chrono::steady_clock::now();
  while (rank1 < 0 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(60)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (read_file(log).find(" step ") == std::string::npos) continue;  // training under way
    for (const auto& e : fs::directory_iterator("/proc")) {
      std::string name = e.path().filename().string();
      if (name.find_first_not_of("0123456789") != std::string::npos) continue;
      std::string stat = read_file(e.path().string() + "/stat");
      auto close = stat.rfind(')');
      if (close == std::string::npos) continue;
      std::istringstream fields(stat.substr(close + 2));
      std::string state;
      pid_t ppid = 0;
      fields >> state >> ppid;
      std::string env = read_file(e.path().string() + "/environ");
      if (ppid == launcher && env.find(std::string("RANK=1") + '\0') != std::string::npos &&
          env.find("LOCAL_RANK=1") != std::string::npos)
        rank1 = static_cast<pid_t>(std::stol(name));
    }
  }
  ASSERT_GT(rank1, 0) << read_file(log);
  ::kill(rank1, SIGKILL);
  int code = wait_for(launcher, std::chrono::seconds(40));
  if (code == -1) {
    ::kill(launcher, SIGKILL);
    ::waitpid(launcher, nullptr, 0);
  }
  EXPECT_EQ(code, 128 + SIGKILL) << read_file(log);
  EXPECT_NE(read_file(log).find("worker of rank 1 ended with signal 9"), std::string::npos) << read_file(log);

  ::setenv("WORLD_SIZE", "2", 1);
  ::setenv("RANK", "0", 1);
  auto nested = run_cli("train -c " + cfg + " --overwrite --nproc 2");
  ::unsetenv("WORLD_SIZE");
  ::unsetenv("RANK");
  EXPECT_EQ(nested.code, kExitUsage) << nested.output;
  EXPECT_NE(nested.output.find("WORLD_SIZE is already set"), std::string::npos) << nested.output;
}

}  // namespace attnmt::test
