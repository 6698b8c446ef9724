// The one cache of values derived from a versioned source: a weight's cast
// to the matmul dtype, its FP8 / FP4 codes and decodes, a Scalify scale, a
// matrix product's pre-packed copy of it. A source is anything with a
// version counter bumped whenever its data changes (autograd::Parameter::version);
// a value is derived again when the version moved.
//
// An entry is keyed by (source, owner, kind): the source's address, the
// object the value belongs to (a model's cast cache, a quantiser, a GEMM
// primitive) and what was derived (a Kind, one per user, each holding one
// C++ type). Entries are freed in one place: forget_source() when a source
// dies (its owner calls it before freeing it: a new object at the same
// address with the same version must not find the old values),
// forget_owner() when an owner goes. A value can itself be a source (a GEMM
// packs a quantiser's cached decode); forgetting an entry forgets what was
// derived from its value. Process-wide and thread-safe; a slot's value is
// read and refreshed by the caller, as each user's own locking requires.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "mantissa/tensor/tensor.hpp"

namespace mantissa {

// Bytes a derived value holds in counted tensors (0 for values that hold none).
inline size_t cached_bytes(const Tensor& t) { return t.defined() ? t.bytes() : 0; }

class DerivedCache {
 public:
  // What is derived; each user defines one with static storage (its address is the key).
  struct Kind {
    const char* name;
  };
  struct SlotBase {
    virtual ~SlotBase() = default;
    virtual size_t bytes() const = 0;
    virtual const void* value_address() const = 0;
    int version = -1;  // the source's version the value was derived from (-1: not yet)
  };
  template <class T>
  struct Slot final : SlotBase {
    T value{};
    size_t bytes() const override {
      if constexpr (requires { cached_bytes(value); }) return cached_bytes(value);
      else return 0;
    }
    const void* value_address() const override { return &value; }
  };

  // The slot of (source, owner, kind), created holding a default T on first
  // use; valid until forgotten. A kind must always be used with the same T.
  template <class T>
  Slot<T>& slot(const void* source, const void* owner, const Kind& kind) {
    std::lock_guard lock(mutex_);
    std::unique_ptr<SlotBase>& s = entries_[Key{source, owner, &kind}];
    if (!s) s = std::make_unique<Slot<T>>();
    return static_cast<Slot<T>&>(*s);
  }

  // Frees every value derived from `source` (and what was derived from those).
  void forget_source(const void* source);
  // Frees every value held for `owner` (and what was derived from those).
  void forget_owner(const void* owner);
  // Bytes held in counted tensors: by `owner`'s entries, or by all (null).
  size_t bytes(const void* owner = nullptr) const;
  // Entries of one kind (for tests of a user's lifetimes).
  int64_t count(const Kind& kind) const;

 private:
  struct Key {
    const void* source;
    const void* owner;
    const Kind* kind;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    size_t operator()(const Key& k) const;
  };
  using Entries = std::unordered_map<Key, std::unique_ptr<SlotBase>, KeyHash>;
  // Moves the entries matching `drop` (and, transitively, those derived
  // from their values) into `out`; called with mutex_ held.
  template <class Pred>
  void take(Pred drop, std::vector<std::unique_ptr<SlotBase>>& out);

  mutable std::mutex mutex_;
  Entries entries_;
};

// The process's one cache.
DerivedCache& derived_cache();

}  // namespace mantissa
