// The cache of Winograd-transformed conv weights and the float32 argument check, shared by the 2-d Winograd ops
// (winograd_ops.cpp) and the 3-d ones (conv3d_ops.cpp): one cache, so a weight transformed for one is reused by the
// other, and one limit (PORTER_WINOGRAD_CACHE_MB).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "ops_common.h"

namespace porter {

inline void check_f32(const mx::array& a, const char* what, const char* arg) {
  if (a.dtype() != mx::float32) fail(what, std::string(arg) + " must be float32");
}

// Transformed weights, kept while their weight array lives: a model's frozen conv weights are transformed once.
// Keyed by the weight's array id; the entry holds a reference to that array, so the id cannot be reused by another
// array while cached (an array overwritten in place through Python gets a new id). An entry is dropped when the
// cache holds the last reference to its weight, and least recently used entries go when the transformed weights
// exceed the limit (bytes; PORTER_WINOGRAD_CACHE_MB, default 512; 0 disables the cache).
class WinogradCache {
 public:
  static WinogradCache& get() {
    static WinogradCache cache;
    return cache;
  }
  std::optional<mx::array> lookup(const mx::array& w) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.find(w.id());
    if (it == entries_.end()) return std::nullopt;
    it->second.tick = ++tick_;
    return it->second.u;
  }
  void insert(const mx::array& w, const mx::array& u) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (static_cast<int64_t>(u.nbytes()) > limit_) return;
    sweep_locked();
    auto old = entries_.find(w.id());  // another thread may have inserted it since our lookup
    if (old != entries_.end()) erase_locked(old);
    entries_.emplace(w.id(), Entry{w, u, ++tick_});
    bytes_ += u.nbytes();
    while (bytes_ > limit_) {
      auto oldest = entries_.begin();
      for (auto it = entries_.begin(); it != entries_.end(); ++it) {
        if (it->second.tick < oldest->second.tick) oldest = it;
      }
      erase_locked(oldest);
    }
  }
  void clear() {
    std::lock_guard<std::mutex> lock(mutex_);
    entries_.clear();
    bytes_ = 0;
  }
  void set_limit(int64_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    limit_ = bytes;
    while (bytes_ > limit_ && !entries_.empty()) erase_locked(entries_.begin());
  }
  std::vector<int64_t> info() {
    std::lock_guard<std::mutex> lock(mutex_);
    sweep_locked();
    return {static_cast<int64_t>(entries_.size()), bytes_, limit_};
  }
  bool enabled() {
    std::lock_guard<std::mutex> lock(mutex_);
    return limit_ > 0;
  }

 private:
  struct Entry {
    mx::array w, u;
    uint64_t tick;
  };
  WinogradCache() {
    const char* env = std::getenv("PORTER_WINOGRAD_CACHE_MB");
    if (env && *env) limit_ = std::max<int64_t>(0, std::atoll(env)) << 20;
  }
  void erase_locked(std::unordered_map<std::uintptr_t, Entry>::iterator it) {
    bytes_ -= it->second.u.nbytes();
    entries_.erase(it);
  }
  void sweep_locked() {  // weights nobody else holds any more
    for (auto it = entries_.begin(); it != entries_.end();) {
      const mx::array& w = it->second.w;
      if (w.is_available() && w.data_shared_ptr() && w.is_donatable()) {
        auto dead = it++;
        erase_locked(dead);
      } else {
        ++it;
      }
    }
  }
  std::mutex mutex_;
  std::unordered_map<std::uintptr_t, Entry> entries_;
  uint64_t tick_ = 0;
  int64_t bytes_ = 0;
  int64_t limit_ = int64_t{512} << 20;
};

}  // namespace porter
