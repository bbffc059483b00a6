// ShmRegion: the client's side of Triton's system shared-memory extension.
// Creates a POSIX shared-memory object (shm_open O_CREAT|O_EXCL, so an
// existing object of the same name is never taken over), sizes it and maps
// it into this process; the destructor unmaps and unlinks it. The client
// writes inputs into data() and reads outputs from it; the server reads and
// writes the object through its own descriptor (server/shm/shm_registry.h).
//
// Registering the object with a server (SystemSharedMemoryRegister) and
// unregistering it are the caller's: see RegisterShm / UnregisterShm below,
// which ensemble-cli, ensemble-loadgen, the tests and the benchmark share.
//
//   auto region = es::client::ShmRegion::Create("/my_input", 1 << 20);
//   if (!region.ok()) ...;
//   std::memcpy((*region)->data(), bytes, n);
//
// Thread safety: a ShmRegion is not synchronised; data() is plain memory.
#pragma once

#include <grpcpp/grpcpp.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "clients/api.h"
#include "clients/client.h"
#include "clients/status.h"
#include "proto/grpc_service.grpc.pb.h"

namespace es::client {

class ShmRegion {
 public:
  // `key` is the shm_open name ("/name"); `bytes` > 0.
  static Result<std::unique_ptr<ShmRegion>> Create(const std::string& key, size_t bytes);
  // A key unique to this process and call: "/<prefix>_<pid>_<n>".
  static std::string UniqueKey(const std::string& prefix);
  ~ShmRegion();
  ShmRegion(const ShmRegion&) = delete;
  ShmRegion& operator=(const ShmRegion&) = delete;

  const std::string& key() const { return key_; }
  size_t size() const { return size_; }
  uint8_t* data() { return static_cast<uint8_t*>(map_); }
  const uint8_t* data() const { return static_cast<const uint8_t*>(map_); }

 private:
  ShmRegion(std::string key, int fd, void* map, size_t size) : key_(std::move(key)), fd_(fd), map_(map), size_(size) {}
  std::string key_;
  int fd_;
  void* map_;
  size_t size_;
};

// SystemSharedMemoryRegister / Unregister on `stub`. `prepare` sets the
// call's deadline and metadata (e.g. Client::SetDeadline, which adds the
// token); without it the call gets a 30 s deadline.
grpc::Status RegisterShm(inference::GRPCInferenceService::Stub& stub, const std::string& name, const std::string& key,
                         uint64_t offset, uint64_t byte_size,
                         const std::function<void(grpc::ClientContext*)>& prepare = {});
grpc::Status UnregisterShm(inference::GRPCInferenceService::Stub& stub, const std::string& name,
                           const std::function<void(grpc::ClientContext*)>& prepare = {});

// A request's inputs moved into shared memory (ensemble-cli infer --shm,
// ensemble-loadgen --shm, over gRPC or HTTP): Move() copies every
// raw_input_contents entry into one new object (each at a 64-byte aligned
// offset), registers it with the server as region `name`, points each input
// at its place and clears raw_input_contents. The destructor unregisters the
// region (best effort, 5 s deadline) and unlinks the object; `client` must
// outlive it.
class ShmInputs {
 public:
  static Result<std::unique_ptr<ShmInputs>> Move(const Api& client, const std::string& name,
                                                 inference::ModelInferRequest* request);
  ~ShmInputs();
  ShmInputs(const ShmInputs&) = delete;
  ShmInputs& operator=(const ShmInputs&) = delete;
  const ShmRegion& region() const { return *region_; }

 private:
  ShmInputs(const Api* client, std::string name, std::unique_ptr<ShmRegion> region)
      : client_(client), name_(std::move(name)), region_(std::move(region)) {}
  const Api* client_;
  std::string name_;
  std::unique_ptr<ShmRegion> region_;
};

// Sets the shared-memory parameters on an input or requested output.
template <typename Tensor>
void SetShmParameters(Tensor* tensor, const std::string& region, uint64_t byte_size, uint64_t offset = 0) {
  auto& params = *tensor->mutable_parameters();
  params["shared_memory_region"].set_string_param(region);
  params["shared_memory_byte_size"].set_int64_param(static_cast<int64_t>(byte_size));
  if (offset != 0) params["shared_memory_offset"].set_int64_param(static_cast<int64_t>(offset));
}

}  // namespace es::client
