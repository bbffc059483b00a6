#include "ipc/channel.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>
#include <string>
#include <utility>

namespace es::ipc {
namespace {

uint64_t RoundUpPow2(uint64_t v) {
  uint64_t p = 1;
  while (p < v) p <<= 1;
  return p;
}

uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

std::string Errno(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

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
  ring->capacity = capacity;
  ring->slots_offset = slots_offset;
}

bool RingFits(const RingControl& ring, size_t slot_bytes, uint64_t segment_bytes) {
  if (ring.capacity == 0 || (ring.capacity & (ring.capacity - 1)) != 0) return false;
  if (ring.capacity > (1u << 20)) return false;
  return ring.slots_offset <= segment_bytes &&
         ring.capacity * slot_bytes <= segment_bytes - ring.slots_offset;
}

}  // namespace

Channel::Channel(int fd, uint8_t* base, uint64_t bytes) : fd_(fd), base_(base), mapped_bytes_(bytes) {
  BindRings();
}

Channel::Channel(Channel&& other) noexcept { *this = std::move(other); }

Channel& Channel::operator=(Channel&& other) noexcept {
  if (this != &other) {
    Reset();
    fd_ = std::exchange(other.fd_, -1);
    base_ = std::exchange(other.base_, nullptr);
    mapped_bytes_ = std::exchange(other.mapped_bytes_, 0);
    if (base_) BindRings();
    other.requests_ = {};
    other.completions_ = {};
  }
  return *this;
}

Channel::~Channel() { Reset(); }

void Channel::Reset() {
  if (base_) munmap(base_, mapped_bytes_);
  if (fd_ >= 0) close(fd_);
  base_ = nullptr;
  fd_ = -1;
  mapped_bytes_ = 0;
}

void Channel::BindRings() {
  ChannelHeader& h = header();
  requests_ = SpscRing<RequestDesc>(&h.requests,
                                    reinterpret_cast<RequestDesc*>(base_ + h.requests.slots_offset));
  completions_ = SpscRing<CompletionDesc>(
      &h.completions, reinterpret_cast<CompletionDesc*>(base_ + h.completions.slots_offset));
}

StatusOr<Channel> Channel::Create(const ChannelOptions& options) {
  const uint64_t req_slots = RoundUpPow2(options.request_slots);
  const uint64_t comp_slots = RoundUpPow2(options.completion_slots);
  const Layout layout = ComputeLayout(req_slots, comp_slots, options.arena_bytes);

  // MFD_CLOEXEC: only the host we spawn gets the descriptor, on purpose.
  int fd = memfd_create("ensemble-channel", MFD_CLOEXEC);
  if (fd < 0) return Status::Internal(Errno("memfd_create"));
  if (ftruncate(fd, static_cast<off_t>(layout.total)) != 0) {
    Status s = Status::ResourceExhausted(Errno("ftruncate of channel segment"));
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
  return Channel(fd, static_cast<uint8_t*>(base), layout.total);
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
  std::string error;
  if (h->magic != kMagic) {
    error = "channel segment has a bad magic number (not an ensemble-serve channel)";
  } else if (h->layout_version != kLayoutVersion) {
    error = "channel layout version " + std::to_string(h->layout_version) +
            " does not match this binary's layout version " + std::to_string(kLayoutVersion);
  } else if (h->segment_bytes != size || h->arena_offset > size ||
             h->arena_bytes > size - h->arena_offset) {
    error = "channel header sizes disagree with the segment size " + std::to_string(size);
  } else if (!RingFits(h->requests, sizeof(RequestDesc), size) ||
             !RingFits(h->completions, sizeof(CompletionDesc), size)) {
    error = "channel ring geometry lies outside the segment";
  }
  if (!error.empty()) {
    munmap(base, size);
    close(fd);
    return Status::FailedPrecondition(error);
  }
  return Channel(fd, static_cast<uint8_t*>(base), size);
}

}  // namespace es::ipc
