// Every read of tensor values on the host goes through here: a copy from a device (a wait for everything queued
// before it) or, on the CPU, the same read at the same place in the code. Each call counts one host read, so that a
// step's waits can be counted on a machine without a GPU (common/dispatch_count.h, bench --json). Outside
// src/kernels/ no code reads a tensor's memory but through these (tests/test_dispatch_count.cpp greps for it).
#pragma once
#include <cstdint>
#include <vector>

#include <torch/torch.h>

namespace attnmt {

// Host reads since the process started.
int64_t host_reads();

// Copies of host values to a device (to_device) since the process started.
int64_t device_sends();

// A tensor's values on the host: contiguous, on the CPU, of the type asked for. Made only by to_host().
class HostTensor {
 public:
  HostTensor() = default;
  template <class T>
  const T* data() const {
    return t_.data_ptr<T>();
  }
  // Row r of a 2-D tensor, or the element range [begin, end) of the flat values, as a vector.
  template <class T>
  std::vector<T> values(int64_t begin, int64_t end) const {
    const T* p = this->template data<T>();
    return std::vector<T>(p + begin, p + end);
  }
  const torch::Tensor& tensor() const { return t_; }
  int64_t size(int64_t d) const { return t_.size(d); }
  int64_t numel() const { return t_.numel(); }
  bool defined() const { return t_.defined(); }

 private:
  friend HostTensor to_host(const torch::Tensor& t, torch::ScalarType dtype);
  torch::Tensor t_;
};

// One host read: t's values (converted to dtype first, where they are) on the host.
HostTensor to_host(const torch::Tensor& t, torch::ScalarType dtype);

// One host read: the flat values of t as a vector of T (int64_t, float, double, bool).
template <class T>
std::vector<T> host_vector(const torch::Tensor& t) {
  const HostTensor h = to_host(t, c10::CppTypeToScalarType<T>::value);
  return h.template values<T>(0, h.numel());
}

// One host read: the value of a one-element tensor.
template <class T>
T host_scalar(const torch::Tensor& t) {
  TORCH_CHECK(t.numel() == 1, "host_scalar: one element expected, got ", t.sizes());
  return *to_host(t, c10::CppTypeToScalarType<T>::value).template data<T>();
}

// Building a CPU tensor from host values is no read: a copy of a vector, [n] or reshaped.
template <class T>
torch::Tensor from_host(const std::vector<T>& v) {
  return torch::tensor(v, torch::TensorOptions().dtype(c10::CppTypeToScalarType<T>::value));
}

// Host values onto a device without waiting for it: on a CPU the tensor itself; elsewhere a pinned copy sent by a
// transfer that does not wait (LibTorch's pinned allocator keeps the buffer until the copy is done), where a plain
// .to(device) from pageable memory waits for the device's stream.
// Each call counts one send (device_sends), on a CPU too, so that a loop's transfers can be counted without a GPU.
torch::Tensor to_device(const torch::Tensor& cpu, const torch::Device& device);
template <class T>
torch::Tensor to_device(const std::vector<T>& v, const torch::Device& device) {
  return to_device(from_host(v), device);
}

}  // namespace attnmt

namespace attnmt {

// The values of a tensor that lives on the CPU by design (lengths, indices built on the host): no device is waited
// for, so nothing is counted; a tensor on a device is refused (it would be a read: to_host).
template <class T>
std::vector<T> cpu_vector(const torch::Tensor& t) {
  TORCH_CHECK(t.is_cpu(), "cpu_vector: a tensor on ", t.device(), " is a host read (use to_host)");
  const torch::Tensor c = t.to(c10::CppTypeToScalarType<T>::value).contiguous();
  return std::vector<T>(c.data_ptr<T>(), c.data_ptr<T>() + c.numel());
}

}  // namespace attnmt

namespace attnmt {

// The value of a one-element tensor that lives on the CPU by design (see cpu_vector).
template <class T>
T cpu_scalar(const torch::Tensor& t) {
  TORCH_CHECK(t.numel() == 1, "cpu_scalar: one element expected, got ", t.sizes());
  return cpu_vector<T>(t)[0];
}

}  // namespace attnmt
