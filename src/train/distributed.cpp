#include "train/distributed.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <spdlog/spdlog.h>

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/cuda.h>

#include "attnmt_build_config.h"  // ATTNMT_HAVE_C10D, _GLOO, _NCCL (CMakeLists.txt)

#ifdef ATTNMT_HAVE_C10D
#include <torch/version.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef ATTNMT_HAVE_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#ifdef ATTNMT_HAVE_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif
#endif

#include "common/errors.h"
#include "common/runtime.h"

namespace attnmt {

namespace {

// An integer environment variable, or fallback when unset; anything but a whole number is bad input.
int env_int(const char* name, int fallback, int min_value, int max_value) {
  const char* v = env_var(name);
  if (!v) return fallback;
  char* end = nullptr;
  errno = 0;
  long x = std::strtol(v, &end, 10);
  if (*v == '\0' || *end != '\0' || errno != 0 || x < min_value || x > max_value)
    throw UsageError(std::string(name) + ": expected a whole number in [" + std::to_string(min_value) + ", " +
                     std::to_string(max_value) + "], got '" + v + "'");
  return static_cast<int>(x);
}

}  // namespace

DistSpec dist_spec_from_env() {
  DistSpec s;
  s.world = env_int("WORLD_SIZE", 1, 1, 1 << 16);
  s.rank = env_int("RANK", 0, 0, s.world - 1);
  s.local_world = env_int("LOCAL_WORLD_SIZE", s.world, 1, s.world);
  s.local_rank = env_int("LOCAL_RANK", s.rank % s.local_world, 0, s.local_world - 1);
  if (const char* a = env_var("MASTER_ADDR")) {
    if (*a == '\0') throw UsageError("MASTER_ADDR: empty");
    s.master_addr = a;
  }
  s.master_port = env_int("MASTER_PORT", s.master_port, 1, 65535);
  if (s.world > 1 && !env_var("RANK")) throw UsageError("WORLD_SIZE is " + std::to_string(s.world) + " but RANK is not set");
  return s;
}

torch::Device rank_device(const DistSpec& spec, const torch::Device& device) {
  if (!device.is_cuda()) return device;
  const int visible = static_cast<int>(torch::cuda::device_count());
  if (spec.local_rank >= visible)
    throw UsageError("LOCAL_RANK " + std::to_string(spec.local_rank) + ": only " + std::to_string(visible) +
                     " CUDA device(s) visible on this machine (one device per local rank)");
  torch::Device d(torch::kCUDA, static_cast<c10::DeviceIndex>(spec.local_rank));
  c10::impl::getDeviceGuardImpl(torch::kCUDA)->setDevice(d);  // NCCL and the caching allocator use the current device
  return d;
}

namespace {
[[maybe_unused]] const char* const kNoGloo =
    "data-parallel training on CPU needs c10d's Gloo, and this attnmt was built without it (its LibTorch has Gloo "
    "built in and ships no Gloo headers, or libgloo-dev was missing when it was configured; Debian's LibTorch has it)";
}  // namespace

#ifdef ATTNMT_HAVE_C10D

std::string distributed_unavailable_reason(const torch::Device& device) {
#ifdef ATTNMT_HAVE_NCCL
  if (device.is_cuda()) return "";
#endif
#ifdef ATTNMT_HAVE_GLOO
  return "";
#else
  return device.is_cuda() ? "data-parallel training on CUDA needs c10d's NCCL or Gloo; this attnmt was built with neither"
                          : kNoGloo;
#endif
}

// What the Gloo and NCCL groups derive from, the type whose collectives attnmt calls: c10d::ProcessGroup in LibTorch
// 1.x, c10d::Backend from 2.0 on (where a ProcessGroup dispatches to backends). The one place that knows the difference.
#if TORCH_VERSION_MAJOR >= 2
using CollectiveGroup = c10d::Backend;
#else
using CollectiveGroup = c10d::ProcessGroup;
#endif

struct Distributed::Impl {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<CollectiveGroup> pg;
  std::string backend;
  torch::Device device{torch::kCPU};  // where the backend's tensors must be: NCCL takes CUDA tensors only
  std::vector<torch::Tensor> buckets;

  // t on the backend's device (t itself when it is there already).
  torch::Tensor on_backend(const torch::Tensor& t) const { return t.device() == device ? t : t.to(device); }
};

namespace {
// LibTorch 2.x's TCPStore serves through libuv by default, and refuses to start where LibTorch was built without it
// (Debian's 2.6). attnmt's few ranks need nothing from libuv: the store runs on its plain socket server in every
// version (1.13 has no such option; the overloads pick the one that compiles).
template <class Options>
auto without_libuv(Options& o, int) -> decltype(o.useLibUV = false, void()) {
  o.useLibUV = false;
}
template <class Options>
void without_libuv(Options&, long) {}

// Runs one collective; a peer that died or a timeout becomes one clear Error.
template <typename F>
void collective(const DistSpec& s, const std::string& what, F&& f) {
  try {
    f();
  } catch (const c10::Error& e) {
    throw Error("distributed: rank " + std::to_string(s.rank) + ": " + what + " failed (another rank exited or timed out): " +
                first_line(e.what_without_backtrace(), 300));
  } catch (const std::exception& e) {
    throw Error("distributed: rank " + std::to_string(s.rank) + ": " + what + " failed (another rank exited or timed out): " +
                first_line(e.what(), 300));
  }
}
}  // namespace

Distributed::Distributed(const DistSpec& spec, const torch::Device& device, std::chrono::milliseconds timeout)
    : spec_(spec), impl_(std::make_unique<Impl>()) {
  collective(spec_, "joining the group at " + spec_.master_addr + ":" + std::to_string(spec_.master_port), [&] {
    c10d::TCPStoreOptions so;
    so.port = static_cast<std::uint16_t>(spec_.master_port);
    so.isServer = spec_.rank == 0;
    so.numWorkers = spec_.world;
    so.timeout = timeout;
    without_libuv(so, 0);
    impl_->store = c10::make_intrusive<c10d::TCPStore>(spec_.master_addr, so);
#ifdef ATTNMT_HAVE_NCCL
    if (device.is_cuda()) {
      auto opts = c10d::ProcessGroupNCCL::Options::create();
      opts->timeout = timeout;
      impl_->pg = c10::make_intrusive<c10d::ProcessGroupNCCL>(impl_->store, spec_.rank, spec_.world, opts);
      impl_->backend = "nccl";
      impl_->device = device;
      return;
    }
#endif
#ifdef ATTNMT_HAVE_GLOO
    if (device.is_cuda()) spdlog::warn("this attnmt was built without NCCL: Gloo sums CUDA gradients through host memory");
    auto opts = c10d::ProcessGroupGloo::Options::create(timeout);
    // The interface that reaches MASTER_ADDR; on one machine that is loopback.
    opts->devices.push_back(spec_.master_addr == "127.0.0.1" || spec_.master_addr == "localhost"
                                ? c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1")
                                : c10d::ProcessGroupGloo::createDefaultDevice());
    impl_->pg = c10::make_intrusive<c10d::ProcessGroupGloo>(impl_->store, spec_.rank, spec_.world, opts);
    impl_->backend = "gloo";
#else
    throw UsageError(distributed_unavailable_reason(device));
#endif
  });
}

Distributed::~Distributed() = default;

std::string Distributed::backend() const { return impl_->backend; }

void Distributed::broadcast_(std::vector<torch::Tensor> tensors) {
  // One operation per tensor (a c10d broadcast of several tensors means copies of one on several devices).
  collective(spec_, "broadcast", [&] {
    std::vector<std::vector<torch::Tensor>> args;
    std::vector<c10::intrusive_ptr<c10d::Work>> works;
    args.reserve(tensors.size());
    for (auto& t : tensors) {
      args.push_back({impl_->on_backend(t)});
      works.push_back(impl_->pg->broadcast(args.back()));
    }
    for (auto& w : works) w->wait();
    for (size_t i = 0; i < tensors.size(); ++i)
      if (!args[i][0].is_same(tensors[i])) tensors[i].copy_(args[i][0]);
  });
}

void Distributed::allreduce_sum_(torch::Tensor t) {
  std::vector<torch::Tensor> v{impl_->on_backend(t)};
  collective(spec_, "all-reduce", [&] {
    impl_->pg->allreduce(v)->wait();
    if (!v[0].is_same(t)) t.copy_(v[0]);
  });
}

std::vector<torch::Tensor> Distributed::allgather(const torch::Tensor& t) {
  std::vector<torch::Tensor> in{impl_->on_backend(t.contiguous())};
  std::vector<std::vector<torch::Tensor>> out(1);
  for (int r = 0; r < spec_.world; ++r) out[0].push_back(torch::empty_like(in[0]));
  collective(spec_, "all-gather", [&] { impl_->pg->allgather(out, in)->wait(); });
  for (auto& o : out[0]) o = o.to(t.device());
  return out[0];
}

void Distributed::barrier() {
  collective(spec_, "barrier", [&] { impl_->pg->barrier()->wait(); });
}

void Distributed::attach_gradient_buckets(const std::vector<torch::Tensor>& params, int64_t bucket_bytes) {
  TORCH_CHECK(bucket_bytes > 0, "attach_gradient_buckets: bucket_bytes must be positive");
  impl_->buckets.clear();
  stats_.gradient_bytes = 0;
  // Parameters in order, cut into runs of about bucket_bytes of one dtype and device each.
  size_t i = 0;
  while (i < params.size()) {
    const auto opts = params[i].options();
    int64_t numel = 0;
    size_t j = i;
    while (j < params.size() && params[j].options().dtype() == opts.dtype() && params[j].device() == opts.device() &&
           (j == i || (numel + params[j].numel()) * params[j].element_size() <= bucket_bytes)) {
      numel += params[j].numel();
      ++j;
    }
    torch::Tensor flat = torch::zeros({numel}, torch::TensorOptions().dtype(opts.dtype()).device(opts.device()));
    int64_t off = 0;
    for (size_t k = i; k < j; ++k) {
      torch::Tensor p = params[k];
      torch::Tensor view = flat.narrow(0, off, p.numel()).view(p.sizes());
      if (p.grad().defined()) view.copy_(p.grad());
      p.mutable_grad() = view;
      off += p.numel();
    }
    stats_.gradient_bytes += numel * static_cast<int64_t>(flat.element_size());
    impl_->buckets.push_back(flat);
    i = j;
  }
  stats_.buckets = static_cast<int64_t>(impl_->buckets.size());
}

void Distributed::zero_gradients() {
  for (auto& b : impl_->buckets) b.zero_();
}

void Distributed::allreduce_gradients() {
  auto t0 = std::chrono::steady_clock::now();
  collective(spec_, "gradient all-reduce", [&] {
    std::vector<c10::intrusive_ptr<c10d::Work>> works;
    std::vector<std::vector<torch::Tensor>> args;
    args.reserve(impl_->buckets.size());
    for (auto& b : impl_->buckets) {
      args.push_back({b});
      works.push_back(impl_->pg->allreduce(args.back()));
    }
    for (auto& w : works) w->wait();
  });
  stats_.gradient_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ++stats_.gradient_allreduces;
}

#else  // built without c10d

std::string distributed_unavailable_reason(const torch::Device& device) {
  return device.is_cuda() ? "data-parallel training on CUDA needs c10d's NCCL or Gloo; this attnmt was built with neither"
                          : kNoGloo;
}

struct Distributed::Impl {};

Distributed::Distributed(const DistSpec& spec, const torch::Device& device, std::chrono::milliseconds) : spec_(spec) {
  throw UsageError(distributed_unavailable_reason(device));
}
Distributed::~Distributed() = default;
std::string Distributed::backend() const { return "none"; }
void Distributed::broadcast_(std::vector<torch::Tensor>) {}
void Distributed::allreduce_sum_(torch::Tensor) {}
std::vector<torch::Tensor> Distributed::allgather(const torch::Tensor& t) { return {t}; }
void Distributed::barrier() {}
void Distributed::attach_gradient_buckets(const std::vector<torch::Tensor>&, int64_t) {}
void Distributed::zero_gradients() {}
void Distributed::allreduce_gradients() {}

#endif

}  // namespace attnmt
