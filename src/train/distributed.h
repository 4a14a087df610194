// Data-parallel training over LibTorch's c10d: a process group (Gloo on CPU; NCCL for CUDA tensors when
// the LibTorch build has it), parameter broadcast from rank 0, and gradients summed in flat buckets.
// Ranks find each other through a TCPStore at MASTER_ADDR:MASTER_PORT, the torchrun convention.
#pragma once
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <torch/types.h>

namespace attnmt {

// Where this process sits in a job, from RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and
// MASTER_PORT (as torchrun or a cluster scheduler sets them). world == 1 when WORLD_SIZE is unset.
struct DistSpec {
  int rank = 0;
  int world = 1;
  int local_rank = 0;
  int local_world = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
};

// Reads the environment; a malformed or inconsistent value is a UsageError naming the variable.
DistSpec dist_spec_from_env();

// Why data-parallel training on `device` cannot run in this build ("" when it can): CPU ranks need c10d's Gloo,
// CUDA ranks NCCL (or Gloo, through host memory). Which of them a build has depends on the LibTorch it was
// configured with (CMakeLists.txt says why).
std::string distributed_unavailable_reason(const torch::Device& device);
inline bool distributed_available(const torch::Device& device = torch::Device(torch::kCPU)) {
  return distributed_unavailable_reason(device).empty();
}

// The device of rank spec.local_rank when the run's device is CUDA (one device per local rank), else `device`.
// Throws UsageError when LOCAL_RANK names a device that is not visible; makes it the current CUDA device.
torch::Device rank_device(const DistSpec& spec, const torch::Device& device);

// Traffic counters of one process group, for the training log and the benchmark.
struct CommStats {
  int64_t gradient_allreduces = 0;  // calls of allreduce_gradients()
  double gradient_seconds = 0;      // wall time inside them
  int64_t gradient_bytes = 0;       // bytes summed per call (all buckets)
  int64_t buckets = 0;
};

class Distributed {
 public:
  // Joins the group (rank 0 hosts the store); throws Error when the others do not arrive within timeout.
  Distributed(const DistSpec& spec, const torch::Device& device, std::chrono::milliseconds timeout);
  ~Distributed();
  Distributed(const Distributed&) = delete;
  Distributed& operator=(const Distributed&) = delete;

  int rank() const { return spec_.rank; }
  int world() const { return spec_.world; }
  bool is_main() const { return spec_.rank == 0; }
  std::string backend() const;

  // Every rank gets rank 0's values, in place.
  void broadcast_(std::vector<torch::Tensor> tensors);
  // Element-wise sum over ranks, in place.
  void allreduce_sum_(torch::Tensor t);
  // One tensor of the same shape from every rank, in rank order.
  std::vector<torch::Tensor> allgather(const torch::Tensor& t);
  void barrier();

  // Makes every parameter's .grad a view into one of a few flat buffers of about bucket_bytes each, so
  // that backward accumulates straight into them and allreduce_gradients() sums whole buckets.
  void attach_gradient_buckets(const std::vector<torch::Tensor>& params, int64_t bucket_bytes = 25 << 20);
  // Zeroes the buckets (Optimizer::zero_grad would try to detach the views and fail).
  void zero_gradients();
  // Sums every bucket over the ranks (all launched at once, then awaited).
  void allreduce_gradients();
  const CommStats& stats() const { return stats_; }

 private:
  struct Impl;
  DistSpec spec_;
  std::unique_ptr<Impl> impl_;
  CommStats stats_;
};

}  // namespace attnmt
