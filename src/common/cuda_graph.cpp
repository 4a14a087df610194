#include "common/cuda_graph.h"

#include <stdexcept>
#include <string>

#include "attnmt_build_config.h"  // ATTNMT_HAVE_CUDA_GRAPHS (CMakeLists.txt)

#ifdef ATTNMT_HAVE_CUDA_GRAPHS
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

namespace attnmt {

#ifdef ATTNMT_HAVE_CUDA_GRAPHS

struct CudaGraph::Impl {
  at::cuda::CUDAGraph graph;
  c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool();
  bool captured = false;
};

bool CudaGraph::available() { return true; }

CudaGraph::CudaGraph() : impl_(std::make_unique<Impl>()) {}

CudaGraph::~CudaGraph() = default;

void CudaGraph::warm_up(const std::function<void()>& body) {
  c10::cuda::device_synchronize();  // the side stream must see what the current one queued
  {
    const c10::cuda::CUDAStreamGuard on_side(impl_->side);
    body();
  }
  c10::cuda::device_synchronize();
}

void CudaGraph::capture(const std::function<void()>& body) {
  if (impl_->captured) throw std::logic_error("CudaGraph::capture: already captured");
  c10::cuda::device_synchronize();
  {
    const c10::cuda::CUDAStreamGuard on_side(impl_->side);
    impl_->graph.capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
    try {
      body();
    } catch (...) {
      // End the capture so that the stream can run work again; the partial graph is dropped with this object.
      cudaGraph_t partial = nullptr;
      (void)cudaStreamEndCapture(impl_->side.stream(), &partial);
      if (partial != nullptr) (void)cudaGraphDestroy(partial);
      (void)cudaGetLastError();
      throw;
    }
    impl_->graph.capture_end();
  }
  c10::cuda::device_synchronize();
  impl_->captured = true;
}

void CudaGraph::replay() {
  if (!impl_->captured) throw std::logic_error("CudaGraph::replay: nothing captured");
  impl_->graph.replay();
}

#else

struct CudaGraph::Impl {};

bool CudaGraph::available() { return false; }

CudaGraph::CudaGraph() = default;

CudaGraph::~CudaGraph() = default;

void CudaGraph::warm_up(const std::function<void()>&) {
  throw std::logic_error("CudaGraph: this attnmt's LibTorch has no CUDA");
}

void CudaGraph::capture(const std::function<void()>&) {
  throw std::logic_error("CudaGraph: this attnmt's LibTorch has no CUDA");
}

void CudaGraph::replay() { throw std::logic_error("CudaGraph: this attnmt's LibTorch has no CUDA"); }

#endif

}  // namespace attnmt
