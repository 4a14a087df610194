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

std::vector<std::string> own_command_line() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::vector<std::string> args;
  std::string a;
  while (std::getline(in, a, '\0')) args.push_back(a);
  if (args.empty()) throw Error("cannot read /proc/self/cmdline to start the workers");
  return args;
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
  std::vector<std::string> args = own_command_line();
  const int port = free_loopback_port();
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  spdlog::info("launching {} workers on 127.0.0.1:{} ({} core(s) each unless --threads says otherwise)", nproc, port,
               std::max(1u, hw / static_cast<unsigned>(nproc)));

  std::vector<std::string> base_env;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    std::string k = kv.substr(0, kv.find('='));
    if (k == "RANK" || k == "WORLD_SIZE" || k == "LOCAL_RANK" || k == "LOCAL_WORLD_SIZE" || k == "MASTER_ADDR" ||
        k == "MASTER_PORT" || k == kLocalWorkerEnv)
      continue;
    base_env.push_back(kv);
  }
  g_forward_signal.store(0);
  auto old_int = std::signal(SIGINT, remember_signal);
  auto old_term = std::signal(SIGTERM, remember_signal);

  std::vector<pid_t> pids;
  for (int r = 0; r < nproc; ++r) {
    std::vector<std::string> env = base_env;
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
    int rc = posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv.data(), envp.data());
    if (rc != 0) {
      for (pid_t p : pids) ::kill(p, SIGKILL);
      for (pid_t p : pids) ::waitpid(p, nullptr, 0);
      std::signal(SIGINT, old_int);
      std::signal(SIGTERM, old_term);
      throw Error(std::string("cannot start worker process: ") + std::strerror(rc));
    }
    pids.push_back(pid);
  }

  // When one worker fails, the others notice at their next collective and exit with 1 ("another rank
  // exited") in some order; they get 2 s to do so, then SIGTERM, then SIGKILL after 10 s. The code passed on
  // is the most telling one of the workers that ended on their own: bad input (2) before a crash (signal,
  // other codes) before a runtime failure (1), which is also what a rank's lost peer gives.
  using clock = std::chrono::steady_clock;
  const auto never = clock::time_point::max();
  int result = 0, result_rank = 0;
  auto telling = [](int code) { return code == kExitUsage ? 3 : code == kExitFailure ? 1 : 2; };
  size_t alive = pids.size();
  int forwarded = 0;
  bool stopping = false;
  auto terminate_at = never, kill_at = never;
  while (alive > 0) {
    int sig = g_forward_signal.load();
    if (sig != 0 && sig != forwarded) {  // a stop request: every rank stops at the same step and rank 0 saves
      for (pid_t p : pids)
        if (p > 0) ::kill(p, sig);
      forwarded = sig;
    }
    const auto now = clock::now();
    if (now > terminate_at) {
      for (pid_t p : pids)
        if (p > 0) ::kill(p, SIGTERM);
      stopping = true;
      terminate_at = never;
      kill_at = now + std::chrono::seconds(10);
    }
    if (now > kill_at) {
      for (pid_t p : pids)
        if (p > 0) ::kill(p, SIGKILL);
      kill_at = never;
    }
    int status = 0;
    pid_t done = ::waitpid(-1, &status, WNOHANG);
    if (done <= 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    for (size_t r = 0; r < pids.size(); ++r) {
      if (pids[r] != done) continue;
      pids[r] = -1;
      --alive;
      int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      if (code == 0 || stopping) continue;  // workers we stopped say nothing about the cause
      if (result == 0 || telling(code) > telling(result)) {
        result = code;
        result_rank = static_cast<int>(r);
      }
      if (alive > 0 && forwarded == 0 && terminate_at == never) terminate_at = clock::now() + std::chrono::seconds(2);
    }
  }
  // A worker that exits with 1 or 2 has said why; a crash has not.
  if (result != 0 && result != kExitFailure && result != kExitUsage && forwarded == 0)
    spdlog::error("worker of rank {} ended with {} {}", result_rank, result > 128 ? "signal" : "code",
                  result > 128 ? result - 128 : result);
  std::signal(SIGINT, old_int);
  std::signal(SIGTERM, old_term);
  return result;
}

}  // namespace attnmt
