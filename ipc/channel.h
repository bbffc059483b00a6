// Channel: the shared-memory segment between the router and one model host.
//
// The router Create()s a channel (an anonymous memfd: it has no name, so it
// cannot leak into /dev/shm and disappears with the last process that holds
// it), passes the descriptor to the host it spawns, and the host Attach()es
// to it. Attach validates the header: magic, layout version, and that every
// offset and size it names lies inside the segment, so a corrupt or foreign
// segment is a clear error, never a wild read.
//
// Geometry (segment size, arena offset and size, ring capacities and slot
// offsets) is read once, at Create or Attach, and kept in this object: both
// sides can write the header, so nothing that decides where a pointer goes
// is ever read from it again. Create seals the memfd against shrinking and
// growing (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL), so a host cannot
// truncate the segment under the router's mapping (which would SIGBUS it).
//
// Ownership: move-only; the destructor unmaps and closes the descriptor.
// Thread safety: the accessors are thread-safe; the rings are SPSC across
// processes, so each side serialises its own threads (see RouterChannel,
// HostChannel in channel_ends.h).
#pragma once

#include <cstdint>

#include "common/status.h"
#include "ipc/layout.h"
#include "ipc/ring.h"

namespace es::ipc {

struct ChannelOptions {
  uint64_t arena_bytes = 64ULL << 20;
  uint32_t request_slots = 256;     // rounded up to a power of two
  uint32_t completion_slots = 256;  // rounded up to a power of two
};

// The validated geometry of a segment: the only sizes and offsets a Channel
// ever computes an address from.
struct ChannelGeometry {
  uint64_t segment_bytes = 0;
  uint64_t arena_offset = 0;
  uint64_t arena_bytes = 0;
  uint64_t request_capacity = 0;
  uint64_t request_slots_offset = 0;
  uint64_t completion_capacity = 0;
  uint64_t completion_slots_offset = 0;
};

class Channel {
 public:
  // Router side: a fresh, initialised segment with an empty arena.
  static StatusOr<Channel> Create(const ChannelOptions& options);
  // Host side: map the segment behind `fd` (the channel takes ownership of it).
  static StatusOr<Channel> Attach(int fd);

  Channel() = default;
  Channel(Channel&& other) noexcept;
  Channel& operator=(Channel&& other) noexcept;
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;
  ~Channel();

  bool valid() const { return base_ != nullptr; }
  int fd() const { return fd_; }
  ChannelHeader& header() const { return *reinterpret_cast<ChannelHeader*>(base_); }
  SpscRing<RequestDesc>& requests() { return requests_; }
  SpscRing<CompletionDesc>& completions() { return completions_; }
  // The arena's geometry as validated at Create/Attach, never re-read from
  // the segment (the peer could rewrite the header).
  uint8_t* arena() const { return base_ + geometry_.arena_offset; }
  uint64_t arena_bytes() const { return geometry_.arena_bytes; }
  const ChannelGeometry& geometry() const { return geometry_; }

  // True when [offset, offset + bytes) lies inside the arena (overflow-safe).
  bool ArenaRangeValid(uint64_t offset, uint64_t bytes) const {
    const uint64_t size = arena_bytes();
    return offset <= size && bytes <= size - offset;
  }

 private:
  Channel(int fd, uint8_t* base, const ChannelGeometry& geometry);
  void BindRings();
  void Reset();

  int fd_ = -1;
  uint8_t* base_ = nullptr;
  ChannelGeometry geometry_;  // snapshot, see arena()
  SpscRing<RequestDesc> requests_;
  SpscRing<CompletionDesc> completions_;
};

}  // namespace es::ipc
