#include "train/launcher.h"

#include <torch/cuda.h>

#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>

#include <spdlog/spdlog.h>

#include "common/errors.h"
#include "common/runtime.h"

extern char** environ;

namespace attnmt {

namespace {

std::atomic<int> g_forward_signal{0};
extern "C" void remember_signal(int s) { g_forward_signal.store(s); }

// A port that was free a moment ago (bound to port 0, then released).
int free_loopback_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw Error(std::string("cannot open a socket: ") + std::strerror(errno));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    int e = errno;
    ::close(fd);
    throw Error(std::string("cannot find a free loopback port: ") + std::strerror(e));
  }
  ::close(fd);
  return ntohs(a.sin_port);
}

std::vector<std::string> own_arguments() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::vector<std::string> args;
  std::string a;
  while (std::getline(in, a, '\0')) args.push_back(a);
  if (args.empty()) throw Error("cannot read /proc/self/cmdline to start the workers");
  return args;
}

// The environment every worker inherits: ours, less the variables that place a process in a group.
std::vector<std::string> worker_base_env() {
  std::vector<std::string> base_env;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    std::string k = kv.substr(0, kv.find('='));
    if (k == "RANK" || k == "WORLD_SIZE" || k == "LOCAL_RANK" || k == "LOCAL_WORLD_SIZE" || k == "MASTER_ADDR" ||
        k == "MASTER_PORT" || k == kLocalWorkerEnv)
      continue;
    base_env.push_back(kv);
  }
  return base_env;
}

// Starts rank R of NPROC: this program again, with the group's variables. -1 and errno-like code in *RC on failure.
pid_t spawn_worker(std::vector<std::string> args, std::vector<std::string> env, int r, int nproc, int port, int* rc) {
  env.push_back("RANK=" + std::to_string(r));
  env.push_back("WORLD_SIZE=" + std::to_string(nproc));
  env.push_back("LOCAL_RANK=" + std::to_string(r));
  env.push_back("LOCAL_WORLD_SIZE=" + std::to_string(nproc));
  env.push_back("MASTER_ADDR=127.0.0.1");
  env.push_back("MASTER_PORT=" + std::to_string(port));
  env.push_back(std::string(kLocalWorkerEnv) + "=1");
  std::vector<char*> argv, envp;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  pid_t pid = -1;
  *rc = posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv.data(), envp.data());
  return *rc == 0 ? pid : -1;
}

void signal_all(const std::vector<pid_t>& pids, int sig) {
  for (pid_t p : pids)
    if (p > 0) ::kill(p, sig);
}

// What the workers ended with: the most telling code and its rank, and the stop signal forwarded to them (0: none).
struct WorkersEnded {
  int code = 0;
  int rank = 0;
  int forwarded = 0;
};

// Waits for every worker, forwarding SIGINT/SIGTERM. When one worker fails, the others notice at their next
// collective and exit with 1 ("another rank exited") in some order; they get 2 s to do so, then SIGTERM, then SIGKILL
// after 10 s. The code passed on is the most telling one of the workers that ended on their own: bad input (2) before
// a crash (signal, other codes) before a runtime failure (1), which is also what a rank's lost peer gives.
WorkersEnded wait_for_workers(std::vector<pid_t> pids) {
  using clock = std::chrono::steady_clock;
  const auto never = clock::time_point::max();
  WorkersEnded end;
  auto telling = [](int code) { return code == kExitUsage ? 3 : code == kExitFailure ? 1 : 2; };
  size_t alive = pids.size();
  bool stopping = false;
  auto terminate_at = never, kill_at = never;
  while (alive > 0) {
    const int sig = g_forward_signal.load();
    if (sig != 0 && sig != end.forwarded) {  // a stop request: every rank stops at the same step and rank 0 saves
      signal_all(pids, sig);
      end.forwarded = sig;
    }
    const auto now = clock::now();
    if (now > terminate_at) {
      signal_all(pids, SIGTERM);
      stopping = true;
      terminate_at = never;
      kill_at = now + std::chrono::seconds(10);
    }
    if (now > kill_at) {
      signal_all(pids, SIGKILL);
      kill_at = never;
    }
    int status = 0;
    const pid_t done = ::waitpid(-1, &status, WNOHANG);
    if (done <= 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    const auto it = std::find(pids.begin(), pids.end(), done);
    if (it == pids.end()) continue;
    *it = -1;
    --alive;
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (code == 0 || stopping) continue;  // workers we stopped say nothing about the cause
    if (end.code == 0 || telling(code) > telling(end.code)) {
      end.code = code;
      end.rank = static_cast<int>(it - pids.begin());
    }
    if (alive > 0 && end.forwarded == 0 && terminate_at == never) terminate_at = clock::now() + std::chrono::seconds(2);
  }
  return end;
}

}  // namespace

bool wants_local_launch(int nproc, const DistSpec& spec) {
  if (nproc <= 1 || env_var(kLocalWorkerEnv) != nullptr) return false;
  if (spec.world > 1) throw UsageError("--nproc: WORLD_SIZE is already set (launched by torchrun or a scheduler); use one or the other");
  return true;
}

int launch_local_workers(int nproc, const torch::Device& device) {
  if (!distributed_available(device)) throw UsageError("--nproc: " + distributed_unavailable_reason(device));
  if (device.is_cuda()) {
    const int visible = static_cast<int>(torch::cuda::device_count());
    if (nproc > visible)
      throw UsageError("--nproc " + std::to_string(nproc) + ": only " + std::to_string(visible) +
                       " CUDA device(s) visible, and each rank takes one (use --nproc " + std::to_string(visible) +
                       " or --device cpu)");
  }
  const std::vector<std::string> args = own_arguments();
  const int port = free_loopback_port();
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  spdlog::info("launching {} workers on 127.0.0.1:{} ({} core(s) each unless --threads says otherwise)", nproc, port,
               std::max(1u, hw / static_cast<unsigned>(nproc)));

  const std::vector<std::string> base_env = worker_base_env();
  g_forward_signal.store(0);
  auto old_int = std::signal(SIGINT, remember_signal);
  auto old_term = std::signal(SIGTERM, remember_signal);
  auto restore_signals = [&] {
    std::signal(SIGINT, old_int);
    std::signal(SIGTERM, old_term);
  };
  std::vector<pid_t> pids;
  for (int r = 0; r < nproc; ++r) {
    int rc = 0;
    const pid_t pid = spawn_worker(args, base_env, r, nproc, port, &rc);
    if (pid < 0) {
      signal_all(pids, SIGKILL);
      for (pid_t p : pids) ::waitpid(p, nullptr, 0);
      restore_signals();
      throw Error(std::string("cannot start worker process: ") + std::strerror(rc));
    }
    pids.push_back(pid);
  }
  const WorkersEnded end = wait_for_workers(pids);
  // A worker that exits with 1 or 2 has said why; a crash has not.
  if (end.code != 0 && end.code != kExitFailure && end.code != kExitUsage && end.forwarded == 0)
    spdlog::error("worker of rank {} ended with {} {}", end.rank, end.code > 128 ? "signal" : "code",
                  end.code > 128 ? end.code - 128 : end.code);
  restore_signals();
  return end.code;
}

}  // namespace attnmt
