// The gradient-ready hooks' registry: hooks by leaf, behind a mutex; run outside it.
#include "autograd/hooks.h"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/error.h"

namespace ember {
namespace {

struct Registry {
  std::mutex mutex;
  std::unordered_map<const TensorImpl*, std::vector<std::pair<uint64_t, GradReadyHook>>> by_leaf;
  std::unordered_map<uint64_t, const TensorImpl*> leaf_of;  // hook id -> leaf
  uint64_t next_id = 1;
  std::atomic<size_t> count{0};
};

Registry& registry() {
  static Registry* r = new Registry;  // NOTE: leaked on purpose: handles may outlive static destructors
  return *r;
}

}  // namespace

GradHookHandle& GradHookHandle::operator=(GradHookHandle&& other) noexcept {
  if (this != &other) {
    remove();
    id_ = other.id_;
    other.id_ = 0;
  }
  return *this;
}

void GradHookHandle::remove() {
  if (id_ == 0) return;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto leaf = r.leaf_of.find(id_);
  if (leaf != r.leaf_of.end()) {
    auto& hooks = r.by_leaf[leaf->second];
    std::erase_if(hooks, [&](const auto& entry) { return entry.first == id_; });
    if (hooks.empty()) r.by_leaf.erase(leaf->second);
    r.leaf_of.erase(leaf);
    r.count.fetch_sub(1);
  }
  id_ = 0;
}

GradHookHandle on_grad_ready(const Tensor& leaf, GradReadyHook hook) {
  EMBER_CHECK(leaf.defined() && leaf.requires_grad() && leaf.is_leaf(),
              "on_grad_ready: the tensor must be a leaf that requires grad (a parameter)");
  EMBER_CHECK(bool(hook), "on_grad_ready: empty hook");
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  uint64_t id = r.next_id++;
  r.by_leaf[leaf.impl()].emplace_back(id, std::move(hook));
  r.leaf_of[id] = leaf.impl();
  r.count.fetch_add(1);
  return GradHookHandle(id);
}

namespace detail {

bool any_grad_hooks() { return registry().count.load(std::memory_order_relaxed) > 0; }

bool has_grad_hooks(const TensorImpl* leaf) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  return r.by_leaf.count(leaf) > 0;
}

void run_grad_hooks(const std::shared_ptr<TensorImpl>& leaf) {
  std::vector<GradReadyHook> hooks;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    auto found = r.by_leaf.find(leaf.get());
    if (found == r.by_leaf.end()) return;
    for (auto& entry : found->second) hooks.push_back(entry.second);
  }
  Tensor handle(leaf);
  for (auto& hook : hooks) hook(handle);
}

}  // namespace detail
}  // namespace ember
