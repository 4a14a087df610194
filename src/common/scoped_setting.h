// One shape for attnmt's switches that code sets for a while and then puts back (the kernel path, the arithmetic
// precision, whether attention maps are wanted): a setting read by Get and written by Set, held at a value for as
// long as a ScopedSetting lives, then restored to what it was, also when an exception leaves the scope.
#pragma once

namespace attnmt {

template <class T, T (*Get)(), void (*Set)(T)>
class ScopedSetting {
 public:
  explicit ScopedSetting(T value) : saved_(Get()) { Set(value); }
  ~ScopedSetting() { Set(saved_); }
  ScopedSetting(const ScopedSetting&) = delete;
  ScopedSetting& operator=(const ScopedSetting&) = delete;

 private:
  T saved_;
};

}  // namespace attnmt
