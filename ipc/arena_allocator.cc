#include "ipc/arena_allocator.h"

#include <cassert>

namespace es::ipc {
namespace {
// Spare nodes made room for up front, per kind. Their vectors grow past it
// when many regions are freed at once (a burst of member calls answered):
// spares never outnumber the most nodes the maps held, so they are bounded
// by the peak of regions in flight, and a second burst finds them all.
constexpr size_t kReservedSpareNodes = 64;
}  // namespace

ArenaAllocator::ArenaAllocator(uint64_t capacity) : capacity_(capacity / kAlignment * kAlignment) {
  {
    MutexLock lock(&mu_);
    spare_offset_nodes_.reserve(kReservedSpareNodes);
    spare_size_nodes_.reserve(kReservedSpareNodes);
  }
  Clear();
}

void ArenaAllocator::Put(OffsetMap* map, uint64_t key, uint64_t value) {
  if (spare_offset_nodes_.empty()) {
    map->emplace(key, value);
    return;
  }
  OffsetMap::node_type node = std::move(spare_offset_nodes_.back());
  spare_offset_nodes_.pop_back();
  node.key() = key;
  node.mapped() = value;
  map->insert(std::move(node));
}

void ArenaAllocator::Take(OffsetMap* map, OffsetMap::iterator it) { spare_offset_nodes_.push_back(map->extract(it)); }

void ArenaAllocator::InsertFree(uint64_t offset, uint64_t size) {
  Put(&free_by_offset_, offset, size);
  if (spare_size_nodes_.empty()) {
    free_by_size_.emplace(size, offset);
    return;
  }
  SizeSet::node_type node = std::move(spare_size_nodes_.back());
  spare_size_nodes_.pop_back();
  node.value() = {size, offset};
  free_by_size_.insert(std::move(node));
}

void ArenaAllocator::EraseFree(OffsetMap::iterator it) {
  SizeSet::node_type node = free_by_size_.extract({it->second, it->first});
  if (!node.empty()) spare_size_nodes_.push_back(std::move(node));
  Take(&free_by_offset_, it);
}

std::optional<uint64_t> ArenaAllocator::Allocate(uint64_t bytes) {
  if (bytes > capacity_) return std::nullopt;
  const uint64_t size = bytes == 0 ? kAlignment : (bytes + kAlignment - 1) / kAlignment * kAlignment;
  MutexLock lock(&mu_);
  auto fit = free_by_size_.lower_bound({size, 0});
  if (fit == free_by_size_.end()) return std::nullopt;
  const auto [block_size, offset] = *fit;
  EraseFree(free_by_offset_.find(offset));
  if (block_size > size) InsertFree(offset + size, block_size - size);
  Put(&used_, offset, size);
  used_bytes_ += size;
  return offset;
}

void ArenaAllocator::Free(uint64_t offset) {
  MutexLock lock(&mu_);
  auto used = used_.find(offset);
  assert(used != used_.end() && "ArenaAllocator::Free of a region it did not hand out");
  if (used == used_.end()) return;
  uint64_t start = offset;
  uint64_t size = used->second;
  used_bytes_ -= size;
  Take(&used_, used);
  // Coalesce with the free neighbours on both sides.
  auto next = free_by_offset_.lower_bound(start);
  if (next != free_by_offset_.end() && next->first == start + size) {
    size += next->second;
    EraseFree(next);
  }
  auto after = free_by_offset_.lower_bound(start);
  if (after != free_by_offset_.begin()) {
    auto prev = std::prev(after);
    if (prev->first + prev->second == start) {
      start = prev->first;
      size += prev->second;
      EraseFree(prev);
    }
  }
  InsertFree(start, size);
}

void ArenaAllocator::Clear() {
  MutexLock lock(&mu_);
  free_by_offset_.clear();
  free_by_size_.clear();
  used_.clear();
  used_bytes_ = 0;
  if (capacity_ > 0) InsertFree(0, capacity_);
}

uint64_t ArenaAllocator::used_bytes() const {
  MutexLock lock(&mu_);
  return used_bytes_;
}

uint64_t ArenaAllocator::largest_free_block() const {
  MutexLock lock(&mu_);
  return free_by_size_.empty() ? 0 : free_by_size_.rbegin()->first;
}

}  // namespace es::ipc
