// A CUDA graph: a stretch of device work recorded once and then launched again as one unit, so that a loop whose
// steps are small (a decoder step: about twenty kernels of microseconds each) costs the host one launch a step
// instead of one per operation. LibTorch's at::cuda::CUDAGraph where this attnmt's LibTorch has CUDA (CMake defines
// ATTNMT_HAVE_CUDA_GRAPHS for this file only); elsewhere available() is false and nothing here is called.
//
// The rules of a capture (CUDA Programming Guide, "CUDA Graphs"; PyTorch's notes on CUDA graphs): the recorded work
// reads and writes the same device memory on every launch, so its inputs and outputs are tensors made before the
// capture and updated in place; nothing in it may wait for the device or read a value on the host; tensors it makes
// live in the graph's own memory pool and are rewritten by every launch.
#pragma once
#include <functional>
#include <memory>

namespace attnmt {

class CudaGraph {
 public:
  // True where this build can record CUDA graphs (a LibTorch with CUDA); whether a device is there is the caller's.
  static bool available();

  CudaGraph();
  ~CudaGraph();
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  // Runs body once, eagerly, on the side stream the capture will use (LibTorch's lazy set-up of a stream, such as
  // cuBLAS's workspace, happens there and not inside the capture). Waits for the device before and after.
  void warm_up(const std::function<void()>& body);
  // Records body (its work is not run) on the side stream, in this thread's capture mode, so that other threads'
  // work on the device is not disturbed. Waits for the device before and after. A failure ends the capture cleanly
  // and throws: the caller runs the work eagerly instead.
  void capture(const std::function<void()>& body);
  // Launches the recorded work on the current stream (one launch, no wait).
  void replay();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace attnmt
