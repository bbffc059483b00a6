// Fuzz target: es::ipc::Channel::Attach on a memfd whose bytes are the input.
//
// A host attaches to whatever segment it is handed, and the header inside it
// is written by the other side; Attach must turn any header into either a
// channel whose every offset and size lies inside the mapping, or a clear
// error. The seeds (corpus/channel_attach/) are real segments written by
// Channel::Create, so the mutator starts from valid headers and varies the
// fields that matter. After a successful attach the target uses the channel
// as a peer would: it reads the first and last byte of the arena, pushes a
// request and pops a completion (whatever head/tail the input holds), so any
// geometry that Attach let through but that reaches outside the mapping is
// an ASan report (or SIGBUS), not a silent pass.
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "ipc/channel.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

// One memfd for the whole run, rewritten per input; Attach owns (and closes)
// a dup of it.
int SharedFd() {
  static const int fd = [] {
    const int f = memfd_create("es-fuzz-channel", 0);
    if (f < 0) {
      std::perror("memfd_create");
      std::abort();
    }
    return f;
  }();
  return fd;
}

void Fill(int fd, const uint8_t* data, size_t size) {
  if (ftruncate(fd, 0) != 0 || ftruncate(fd, static_cast<off_t>(size)) != 0) {
    std::perror("ftruncate");
    std::abort();
  }
  size_t done = 0;
  while (done < size) {
    const ssize_t n = pwrite(fd, data + done, size - done, static_cast<off_t>(done));
    if (n <= 0) {
      std::perror("pwrite");
      std::abort();
    }
    done += static_cast<size_t>(n);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const int fd = SharedFd();
  Fill(fd, data, size);
  const int own = dup(fd);
  FUZZ_CHECK(own >= 0, "dup failed");
  auto channel = es::ipc::Channel::Attach(own);
  if (!channel.ok()) {
    FUZZ_CHECK(!channel.status().message().empty(), "an error without a message");
    // The descriptor must have been closed on failure: dup reuses the lowest
    // free number, so a leak would show up as a growing descriptor.
    const int probe = dup(fd);
    FUZZ_CHECK(probe == own, "Attach leaked fd %d on failure", own);
    close(probe);
    return 0;
  }
  es::ipc::Channel& c = *channel;
  FUZZ_CHECK(c.valid(), "an OK channel that is not valid");
  const uint64_t arena_bytes = c.arena_bytes();
  const uint8_t* arena = c.arena();
  FUZZ_CHECK(arena >= reinterpret_cast<const uint8_t*>(&c.header()) &&
                 static_cast<uint64_t>(arena - reinterpret_cast<const uint8_t*>(&c.header())) <= size &&
                 arena_bytes <= size - static_cast<uint64_t>(arena - reinterpret_cast<const uint8_t*>(&c.header())),
             "arena [%p, +%llu) outside the %zu-byte segment", static_cast<const void*>(arena),
             static_cast<unsigned long long>(arena_bytes), size);
  if (arena_bytes > 0) {
    volatile uint8_t sink = arena[0];
    sink = sink ^ arena[arena_bytes - 1];
  }
  FUZZ_CHECK(c.ArenaRangeValid(0, arena_bytes), "the whole arena is not a valid range");
  FUZZ_CHECK(!c.ArenaRangeValid(arena_bytes, 1), "a byte past the arena is a valid range");
  FUZZ_CHECK(!c.ArenaRangeValid(1, UINT64_MAX), "a wrapping range is valid");

  es::ipc::RequestDesc request{};
  request.request_id = 1;
  request.num_inputs = 1;
  (void)c.requests().TryPush(request);
  es::ipc::CompletionDesc completion{};
  (void)c.completions().TryPop(&completion);
  return 0;
}
