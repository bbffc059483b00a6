// ArenaAllocator: hands out regions of a channel's tensor arena.
//
// The allocator's bookkeeping lives in the router's private memory, not in
// the segment: only the router allocates and frees, the host only reads and
// writes the regions it is given. So a host that dies mid-request can corrupt
// at worst the bytes of its own regions, never the free lists, and no lock is
// shared with it.
//
// Best fit over a free list that coalesces neighbours on free; every region
// is aligned to 64 bytes (cache lines, and what SIMD kernels like). Bounded:
// Allocate() fails instead of growing, and the router answers that request
// RESOURCE_EXHAUSTED.
//
// The maps' nodes are recycled (extracted on erase, reused on insert), so in
// the steady state an Allocate/Free pair makes no heap allocation: it runs
// once per member call.
//
// Thread safety: all methods are thread-safe (one mutex guards both maps).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "common/mutex.h"

namespace es::ipc {

class ArenaAllocator {
 public:
  static constexpr uint64_t kAlignment = 64;

  explicit ArenaAllocator(uint64_t capacity);

  // Offset of a region of at least `bytes` (0 is rounded up to one unit).
  std::optional<uint64_t> Allocate(uint64_t bytes);
  // Frees a region returned by Allocate(); freeing anything else is a bug.
  void Free(uint64_t offset);
  // Frees every region (after the host behind the arena was reset).
  void Clear();

  uint64_t capacity() const { return capacity_; }
  uint64_t used_bytes() const;
  uint64_t largest_free_block() const;

 private:
  using OffsetMap = std::map<uint64_t, uint64_t>;
  using SizeSet = std::set<std::pair<uint64_t, uint64_t>>;

  void InsertFree(uint64_t offset, uint64_t size) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EraseFree(OffsetMap::iterator it) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Inserts into `map` with a spare node when there is one.
  void Put(OffsetMap* map, uint64_t key, uint64_t value) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Erases from `map`, keeping the node as a spare.
  void Take(OffsetMap* map, OffsetMap::iterator it) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const uint64_t capacity_;
  mutable Mutex mu_;
  OffsetMap free_by_offset_ ABSL_GUARDED_BY(mu_);
  SizeSet free_by_size_ ABSL_GUARDED_BY(mu_);  // (size, offset)
  OffsetMap used_ ABSL_GUARDED_BY(mu_);        // offset -> size
  uint64_t used_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  // Nodes erased, for the next inserts: never more than the most nodes the
  // maps held at once (the peak of regions in flight and free fragments).
  std::vector<OffsetMap::node_type> spare_offset_nodes_ ABSL_GUARDED_BY(mu_);
  std::vector<SizeSet::node_type> spare_size_nodes_ ABSL_GUARDED_BY(mu_);
};

}  // namespace es::ipc
