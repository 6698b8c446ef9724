#include "mantissa/tensor/derived_cache.hpp"

#include <unordered_set>

namespace mantissa {

size_t DerivedCache::KeyHash::operator()(const Key& k) const {
  uint64_t h = 1469598103934665603ull;
  for (const void* p : {k.source, k.owner, static_cast<const void*>(k.kind)})
    h = (h ^ reinterpret_cast<uintptr_t>(p)) * 1099511628211ull;
  return static_cast<size_t>(h);
}

template <class Pred>
void DerivedCache::take(Pred drop, std::vector<std::unique_ptr<SlotBase>>& out) {
  std::unordered_set<const void*> dead;  // values taken: what was derived from them goes too
  auto sweep = [&](auto matches) {
    size_t before = out.size();
    for (auto it = entries_.begin(); it != entries_.end();) {
      if (matches(it->first)) {
        dead.insert(it->second->value_address());
        out.push_back(std::move(it->second));
        it = entries_.erase(it);
      } else {
        ++it;
      }
    }
    return out.size() != before;
  };
  if (!sweep(drop)) return;
  while (sweep([&](const Key& k) { return dead.count(k.source) != 0; })) {
  }
}

// Values are destroyed after the lock is released.
void DerivedCache::forget_source(const void* source) {
  std::vector<std::unique_ptr<SlotBase>> gone;
  std::lock_guard lock(mutex_);
  take([source](const Key& k) { return k.source == source; }, gone);
}

void DerivedCache::forget_owner(const void* owner) {
  std::vector<std::unique_ptr<SlotBase>> gone;
  std::lock_guard lock(mutex_);
  take([owner](const Key& k) { return k.owner == owner; }, gone);
}

size_t DerivedCache::bytes(const void* owner) const {
  std::lock_guard lock(mutex_);
  size_t n = 0;
  for (const auto& kv : entries_)
    if (!owner || kv.first.owner == owner) n += kv.second->bytes();
  return n;
}

int64_t DerivedCache::count(const Kind& kind) const {
  std::lock_guard lock(mutex_);
  int64_t n = 0;
  for (const auto& kv : entries_) n += kv.first.kind == &kind;
  return n;
}

DerivedCache& derived_cache() {
  // Never destroyed: tensors in static storage may outlive main's return.
  static auto* cache = new DerivedCache();
  return *cache;
}

}  // namespace mantissa
