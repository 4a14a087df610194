#include "common/dispatch_count.h"

#include <atomic>
#include <cstring>
#include <mutex>
#include <unordered_set>
#include <vector>

#include <ATen/record_function.h>

#include "common/host.h"

namespace attnmt {

namespace {
std::atomic<int64_t> g_dispatched{0}, g_root{0};
std::atomic<bool> g_active{false};
std::atomic<bool> g_by_name{false};
std::mutex g_names_mutex;
std::map<std::string, int64_t> g_names;

// Per thread: whether each enclosing recorded function is an ATen operation (the peer's "cpu_parent").
thread_local std::vector<bool> t_enclosing;

bool is_aten(const char* name) { return std::strncmp(name, "aten::", 6) == 0; }

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
  const char* name = fn.name();
  const bool aten = name && is_aten(name);
  if (aten && (t_enclosing.empty() || !t_enclosing.back())) {
    g_root.fetch_add(1, std::memory_order_relaxed);
    if (!is_view_or_allocation(name + 6)) {
      g_dispatched.fetch_add(1, std::memory_order_relaxed);
      if (g_by_name.load(std::memory_order_relaxed)) {
        const std::lock_guard<std::mutex> lock(g_names_mutex);
        ++g_names[name + 6];
      }
    }
  }
  t_enclosing.push_back(aten);
  return nullptr;
}

void on_end(const at::RecordFunction&, at::ObserverContext*) {
  if (!t_enclosing.empty()) t_enclosing.pop_back();
}
}  // namespace

bool is_view_or_allocation(const std::string& op) {
  // The peer's VIEWS set, word for word.
  static const std::unordered_set<std::string> views = {
      "as_strided", "view", "_reshape_alias", "reshape", "select", "slice", "transpose", "t", "expand", "squeeze",
      "unsqueeze", "permute", "narrow", "detach", "alias", "_unsafe_view", "empty", "empty_strided", "empty_like",
      "resolve_conj", "resolve_neg", "unsafe_chunk", "chunk", "split", "unbind", "lift_fresh", "result_type",
      "contiguous", "numpy_T", "item", "to", "_to_copy", "_has_compatible_shallow_copy_type", "set_", "size", "stride"};
  return views.count(op) > 0;
}

DispatchCounter::DispatchCounter(bool by_name) {
  bool expected = false;
  TORCH_CHECK(g_active.compare_exchange_strong(expected, true), "DispatchCounter: one at a time");
  g_dispatched = 0;
  g_root = 0;
  {
    const std::lock_guard<std::mutex> lock(g_names_mutex);
    g_names.clear();
  }
  g_by_name = by_name;
  t_enclosing.clear();
  host_reads_at_start_ = host_reads();
  // Every scope, as the profiler sees them: an autograd node or an engine's step between two operations makes the
  // inner one top-level again.
  handle_ = at::addGlobalCallback(at::RecordFunctionCallback(on_start, on_end));
}

DispatchCounter::~DispatchCounter() {
  at::removeCallback(handle_);
  g_active = false;
}

std::map<std::string, int64_t> DispatchCounter::by_name() const {
  const std::lock_guard<std::mutex> lock(g_names_mutex);
  return g_names;
}

DispatchCount DispatchCounter::count() const {
  return {g_dispatched.load(), g_root.load(), host_reads() - host_reads_at_start_};
}

}  // namespace attnmt
