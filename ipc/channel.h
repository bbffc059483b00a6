// Channel: the shared-memory segment between the router and one model host.
//
// The router Create()s a channel (an anonymous memfd: it has no name, so it
// cannot leak into /dev/shm and disappears with the last process that holds
// it), passes the descriptor to the host it spawns, and the host Attach()es
// to it. Attach validates the header: magic, layout version, and that every
// offset and size it names lies inside the segment, so a corrupt or foreign
// segment is a clear error, never a wild read.
//
// Ownership: move-only; the destructor unmaps and closes the descriptor.
// Thread safety: the accessors are thread-safe; the rings are SPSC across
// processes, so each side serialises its own threads (see RouterChannel,
// HostChannel in channel_ends.h).
#pragma once

#include <cstdint>

#include "config/status.h"
#include "ipc/layout.h"
#include "ipc/ring.h"

namespace es::ipc {

struct ChannelOptions {
  uint64_t arena_bytes = 64ULL << 20;
  uint32_t request_slots = 256;     // rounded up to a power of two
  uint32_t completion_slots = 256;  // rounded up to a power of two
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
  uint8_t* arena() const { return base_ + header().arena_offset; }
  uint64_t arena_bytes() const { return header().arena_bytes; }

  // True when [offset, offset + bytes) lies inside the arena (overflow-safe).
  bool ArenaRangeValid(uint64_t offset, uint64_t bytes) const {
    const uint64_t size = arena_bytes();
    return offset <= size && bytes <= size - offset;
  }

 private:
  Channel(int fd, uint8_t* base, uint64_t bytes);
  void BindRings();
  void Reset();

  int fd_ = -1;
  uint8_t* base_ = nullptr;
  uint64_t mapped_bytes_ = 0;
  SpscRing<RequestDesc> requests_;
  SpscRing<CompletionDesc> completions_;
};

}  // namespace es::ipc
