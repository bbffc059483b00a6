#include "ipc/channel.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>
#include <string>
#include <utility>

#include "common/errno_text.h"

namespace es::ipc {
namespace {

uint64_t RoundUpPow2(uint64_t v) {
  uint64_t p = 1;
  while (p < v) p <<= 1;
  return p;
}

uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

std::string Errno(const char* what) { return std::string(what) + ": " + es::ErrnoText(errno); }

// Both sides compute the same layout from the same sizes.
struct Layout {
  uint64_t request_slots_offset;
  uint64_t completion_slots_offset;
  uint64_t arena_offset;
  uint64_t total;
};

Layout ComputeLayout(uint64_t request_slots, uint64_t completion_slots, uint64_t arena_bytes) {
  constexpr uint64_t kPage = 4096;
  Layout l{};
  l.request_slots_offset = AlignUp(sizeof(ChannelHeader), kCacheLine);
  l.completion_slots_offset =
      AlignUp(l.request_slots_offset + request_slots * sizeof(RequestDesc), kCacheLine);
  l.arena_offset = AlignUp(l.completion_slots_offset + completion_slots * sizeof(CompletionDesc), kPage);
  l.total = AlignUp(l.arena_offset + arena_bytes, kPage);
  return l;
}

void InitRing(RingControl* ring, uint64_t capacity, uint64_t slots_offset) {
  new (&ring->head) std::atomic<uint64_t>(0);
  new (&ring->tail) std::atomic<uint64_t>(0);
  new (&ring->seq) std::atomic<uint32_t>(0);
  new (&ring->sleepers) std::atomic<uint32_t>(0);
  new (&ring->wake_pending) std::atomic<uint32_t>(0);
  ring->capacity = capacity;
  ring->slots_offset = slots_offset;
}

bool RingFits(uint64_t capacity, uint64_t slots_offset, size_t slot_bytes, uint64_t segment_bytes) {
  if (capacity == 0 || (capacity & (capacity - 1)) != 0) return false;
  if (capacity > (1u << 20)) return false;
  return slots_offset % kCacheLine == 0 && slots_offset >= sizeof(ChannelHeader) && slots_offset <= segment_bytes &&
         capacity * slot_bytes <= segment_bytes - slots_offset;
}

// Every field that decides where a pointer goes, copied out of the header
// once so that it is validated and used as the same value.
ChannelGeometry ReadGeometry(const ChannelHeader& h) {
  ChannelGeometry g;
  g.segment_bytes = h.segment_bytes;
  g.arena_offset = h.arena_offset;
  g.arena_bytes = h.arena_bytes;
  g.request_capacity = h.requests.capacity;
  g.request_slots_offset = h.requests.slots_offset;
  g.completion_capacity = h.completions.capacity;
  g.completion_slots_offset = h.completions.slots_offset;
  return g;
}

// Why `g` cannot be the geometry of a segment of `size` bytes, or "".
std::string GeometryError(const ChannelGeometry& g, uint64_t size) {
  if (g.segment_bytes != size || g.arena_offset < sizeof(ChannelHeader) || g.arena_offset > size ||
      g.arena_bytes > size - g.arena_offset || g.arena_offset % kCacheLine != 0) {
    return "channel header sizes disagree with the segment size " + std::to_string(size);
  }
  if (!RingFits(g.request_capacity, g.request_slots_offset, sizeof(RequestDesc), size) ||
      !RingFits(g.completion_capacity, g.completion_slots_offset, sizeof(CompletionDesc), size)) {
    return "channel ring geometry lies outside the segment";
  }
  return "";
}

}  // namespace

Channel::Channel(int fd, uint8_t* base, const ChannelGeometry& geometry)
    : fd_(fd), base_(base), geometry_(geometry) {
  BindRings();
}

// Binds the rings to the snapshot geometry (validated by Create or Attach).
void Channel::BindRings() {
  requests_ = SpscRing<RequestDesc>(&header().requests,
                                    reinterpret_cast<RequestDesc*>(base_ + geometry_.request_slots_offset),
                                    geometry_.request_capacity);
  completions_ = SpscRing<CompletionDesc>(
      &header().completions, reinterpret_cast<CompletionDesc*>(base_ + geometry_.completion_slots_offset),
      geometry_.completion_capacity);
}

Channel::Channel(Channel&& other) noexcept { *this = std::move(other); }

Channel& Channel::operator=(Channel&& other) noexcept {
  if (this != &other) {
    Reset();
    fd_ = std::exchange(other.fd_, -1);
    base_ = std::exchange(other.base_, nullptr);
    geometry_ = std::exchange(other.geometry_, ChannelGeometry{});
    if (base_) BindRings();
    other.requests_ = {};
    other.completions_ = {};
  }
  return *this;
}

Channel::~Channel() { Reset(); }

void Channel::Reset() {
  if (base_) munmap(base_, geometry_.segment_bytes);
  if (fd_ >= 0) close(fd_);
  base_ = nullptr;
  fd_ = -1;
  geometry_ = ChannelGeometry{};
}

StatusOr<Channel> Channel::Create(const ChannelOptions& options) {
  const uint64_t req_slots = RoundUpPow2(options.request_slots);
  const uint64_t comp_slots = RoundUpPow2(options.completion_slots);
  const Layout layout = ComputeLayout(req_slots, comp_slots, options.arena_bytes);

  // MFD_CLOEXEC: only the host we spawn gets the descriptor, on purpose.
  int fd = memfd_create("ensemble-channel", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return Status::Internal(Errno("memfd_create"));
  if (ftruncate(fd, static_cast<off_t>(layout.total)) != 0) {
    Status s = Status::ResourceExhausted(Errno("ftruncate of channel segment"));
    close(fd);
    return s;
  }
  // The size is final: a host that truncated the segment would make every
  // router access past the new end a SIGBUS.
  if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    Status s = Status::Internal(Errno("sealing the channel segment"));
    close(fd);
    return s;
  }
  void* base = mmap(nullptr, layout.total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    Status s = Status::ResourceExhausted(Errno("mmap of channel segment"));
    close(fd);
    return s;
  }
  auto* h = new (base) ChannelHeader{};
  h->magic = kMagic;
  h->layout_version = kLayoutVersion;
  h->segment_bytes = layout.total;
  h->arena_offset = layout.arena_offset;
  h->arena_bytes = options.arena_bytes;
  h->router_pid = getpid();
  InitRing(&h->requests, req_slots, layout.request_slots_offset);
  InitRing(&h->completions, comp_slots, layout.completion_slots_offset);
  return Channel(fd, static_cast<uint8_t*>(base), ReadGeometry(*h));
}

StatusOr<Channel> Channel::Attach(int fd) {
  struct stat st{};
  if (fstat(fd, &st) != 0) {
    Status s = Status::Internal(Errno("fstat of channel fd"));
    close(fd);
    return s;
  }
  const auto size = static_cast<uint64_t>(st.st_size);
  if (size < sizeof(ChannelHeader)) {
    close(fd);
    return Status::InvalidArgument("channel segment of " + std::to_string(size) +
                                   " bytes is smaller than its header");
  }
  void* base = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    Status s = Status::Internal(Errno("mmap of channel segment"));
    close(fd);
    return s;
  }
  const auto* h = static_cast<const ChannelHeader*>(base);
  const ChannelGeometry geometry = ReadGeometry(*h);
  std::string error;
  if (h->magic != kMagic) {
    error = "channel segment has a bad magic number (not an ensemble-serve channel)";
  } else if (h->layout_version != kLayoutVersion) {
    error = "channel layout version " + std::to_string(h->layout_version) +
            " does not match this binary's layout version " + std::to_string(kLayoutVersion);
  } else {
    error = GeometryError(geometry, size);
  }
  if (!error.empty()) {
    munmap(base, size);
    close(fd);
    return Status::FailedPrecondition(error);
  }
  return Channel(fd, static_cast<uint8_t*>(base), geometry);
}

}  // namespace es::ipc
