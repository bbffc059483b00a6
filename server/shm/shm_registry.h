// SharedMemoryRegistry: Triton's system shared-memory extension. A client
// creates a POSIX shared-memory object (shm_open), registers a region of it
// under a name (key, offset, byte_size), then names the region in its
// inference requests instead of sending tensor bytes: inputs and outputs with
// parameters `shared_memory_region`, `shared_memory_offset` (optional, 0)
// and `shared_memory_byte_size`.
//
// Safety against a client that changes the object under us:
//  - the server never maps a region: it reads inputs with pread() and writes
//    outputs with pwrite() on a descriptor it opened at registration, so a
//    client that shrinks (ftruncate) or unlinks the object gets short reads
//    (an INVALID_ARGUMENT naming the region) instead of a SIGBUS in the
//    router;
//  - a region is held by shared_ptr: one unregistered while requests use it
//    stays open until the last of them is done, and a later request naming
//    it gets NOT_FOUND;
//  - every offset and size is checked against the registered region with
//    overflow-checked arithmetic, and the region against the object's size
//    at registration;
//  - the key must name a regular file in the shared-memory filesystem:
//    shm_open itself refuses symbolic links (glibc opens with O_NOFOLLOW) and
//    names with a '/' after the leading one, and the registry refuses
//    anything but a regular file, so a region cannot be made to point at
//    another of the server's files;
//  - at most kMaxRegions are registered at once (each holds a descriptor).
//
// Transports answer Triton's way on top of this: unregistering a name that
// is not registered is OK there (the registry itself says NOT_FOUND), and an
// empty name in status/unregister means every region.
//
// Thread safety: every method from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"

namespace es {

class SharedMemoryRegistry {
 public:
  // Each registered region holds an open descriptor; this bounds them.
  static constexpr size_t kMaxRegions = 256;

  struct RegionInfo {
    std::string name;
    std::string key;  // the shm_open name, e.g. "/my_input"
    uint64_t offset = 0;
    uint64_t byte_size = 0;
  };
  class Region;  // an open registered region (defined in shm_registry.cc)

  SharedMemoryRegistry();
  ~SharedMemoryRegistry();
  SharedMemoryRegistry(const SharedMemoryRegistry&) = delete;
  SharedMemoryRegistry& operator=(const SharedMemoryRegistry&) = delete;

  // ALREADY_EXISTS when `name` is registered; NOT_FOUND when the object
  // `key` does not exist; INVALID_ARGUMENT when the name or key is malformed,
  // byte_size is 0, the object is not a regular file, or
  // [offset, offset + byte_size) is not inside it; RESOURCE_EXHAUSTED with
  // kMaxRegions registered.
  Status Register(const std::string& name, const std::string& key, uint64_t offset, uint64_t byte_size);
  // NOT_FOUND when not registered. Requests already using it finish.
  Status Unregister(const std::string& name);
  void UnregisterAll();
  // Every region (sorted by name), or just `name` (NOT_FOUND when it is not
  // registered).
  StatusOr<std::vector<RegionInfo>> List(const std::string& name = "") const;

  // `bytes` bytes at `offset` inside region `name`, copied out. Errors name
  // the region, offset and sizes: NOT_FOUND for an unknown region,
  // INVALID_ARGUMENT when the range is outside the region or the object
  // shrank under it.
  StatusOr<std::string> Read(const std::string& name, uint64_t offset, uint64_t bytes) const;
  // The same into `dest` (`bytes` bytes, caller-owned): no zero-filled
  // string first.
  Status ReadInto(const std::string& name, uint64_t offset, uint64_t bytes, void* dest) const;
  // A region for writing an output later (the answer comes after the run);
  // `capacity` is checked against the region now and again at Write.
  StatusOr<std::shared_ptr<Region>> Open(const std::string& name, uint64_t offset, uint64_t capacity) const;
  // Writes `data` at the offset Open was given; INVALID_ARGUMENT when it does
  // not fit the capacity or the object shrank.
  static Status Write(const Region& region, const std::string& data);
  // The capacity Open was given (what Write accepts at most).
  static uint64_t Capacity(const Region& region);
  // Reads the whole of a region Open gave (its capacity) into `dest`:
  // INVALID_ARGUMENT when the object shrank under it. For inputs read
  // straight into a host's arena when the request is submitted.
  static Status ReadAll(const Region& region, void* dest);

 private:
  // The region `name` (a copy of the pointer, so it stays open while used).
  StatusOr<std::shared_ptr<Region>> Find(const std::string& name) const;

  mutable Mutex mu_;
  std::map<std::string, std::shared_ptr<Region>> regions_ ABSL_GUARDED_BY(mu_);
};

}  // namespace es
