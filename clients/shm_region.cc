#include "clients/shm_region.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <vector>

#include "common/errno_text.h"

namespace es::client {
namespace {

std::string Errno(const std::string& what) {
  std::string m = what;
  m += ": ";
  m += es::ErrnoText(errno);
  return m;
}

void Prepare(grpc::ClientContext* ctx, const std::function<void(grpc::ClientContext*)>& prepare) {
  if (prepare) {
    prepare(ctx);
  } else {
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  }
}

}  // namespace

std::string ShmRegion::UniqueKey(const std::string& prefix) {
  static std::atomic<uint64_t> counter{0};
  std::string key = "/";
  key += prefix;
  key.push_back('_');
  key += std::to_string(::getpid());
  key.push_back('_');
  key += std::to_string(counter.fetch_add(1));
  return key;
}

Result<std::unique_ptr<ShmRegion>> ShmRegion::Create(const std::string& key, size_t bytes) {
  if (bytes == 0) return Status(grpc::StatusCode::INVALID_ARGUMENT, "shared-memory region of 0 bytes");
  const int fd = ::shm_open(key.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0) return Status(grpc::StatusCode::INVALID_ARGUMENT, Errno("shm_open " + key));
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    Status error(grpc::StatusCode::RESOURCE_EXHAUSTED, Errno("ftruncate " + key));
    ::close(fd);
    ::shm_unlink(key.c_str());
    return error;
  }
  void* map = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) {
    Status error(grpc::StatusCode::RESOURCE_EXHAUSTED, Errno("mmap " + key));
    ::close(fd);
    ::shm_unlink(key.c_str());
    return error;
  }
  return std::unique_ptr<ShmRegion>(new ShmRegion(key, fd, map, bytes));
}

ShmRegion::~ShmRegion() {
  ::munmap(map_, size_);
  ::close(fd_);
  ::shm_unlink(key_.c_str());
}

grpc::Status RegisterShm(inference::GRPCInferenceService::Stub& stub, const std::string& name, const std::string& key,
                         uint64_t offset, uint64_t byte_size,
                         const std::function<void(grpc::ClientContext*)>& prepare) {
  grpc::ClientContext ctx;
  Prepare(&ctx, prepare);
  inference::SystemSharedMemoryRegisterRequest req;
  req.set_name(name);
  req.set_key(key);
  req.set_offset(offset);
  req.set_byte_size(byte_size);
  inference::SystemSharedMemoryRegisterResponse resp;
  return stub.SystemSharedMemoryRegister(&ctx, req, &resp);
}

grpc::Status UnregisterShm(inference::GRPCInferenceService::Stub& stub, const std::string& name,
                           const std::function<void(grpc::ClientContext*)>& prepare) {
  grpc::ClientContext ctx;
  Prepare(&ctx, prepare);
  inference::SystemSharedMemoryUnregisterRequest req;
  req.set_name(name);
  inference::SystemSharedMemoryUnregisterResponse resp;
  return stub.SystemSharedMemoryUnregister(&ctx, req, &resp);
}

Status GrpcApi::RegisterSystemSharedMemory(const std::string& name, const std::string& key, uint64_t offset,
                                           uint64_t byte_size, const CallOptions& call) const {
  return Status::FromGrpc(RegisterShm(client_->stub(), name, key, offset, byte_size,
                                      [&](grpc::ClientContext* ctx) { client_->SetDeadline(ctx, call); }));
}

Status GrpcApi::UnregisterSystemSharedMemory(const std::string& name, const CallOptions& call) const {
  return Status::FromGrpc(
      UnregisterShm(client_->stub(), name, [&](grpc::ClientContext* ctx) { client_->SetDeadline(ctx, call); }));
}

Result<std::unique_ptr<ShmInputs>> ShmInputs::Move(const Api& client, const std::string& name,
                                                   inference::ModelInferRequest* request) {
  const int n = request->raw_input_contents_size();
  if (n == 0 || n != request->inputs_size()) {
    return Status(grpc::StatusCode::INVALID_ARGUMENT, "shared memory: the request has no raw input contents to move");
  }
  constexpr size_t kAlign = 64;
  std::vector<size_t> offsets;
  size_t total = 0;
  for (int i = 0; i < n; ++i) {
    total = (total + kAlign - 1) / kAlign * kAlign;
    offsets.push_back(total);
    total += request->raw_input_contents(i).size();
  }
  ES_ASSIGN_OR_RETURN(auto region, ShmRegion::Create(ShmRegion::UniqueKey("es_client"), std::max<size_t>(total, 1)));
  for (int i = 0; i < n; ++i) {
    const std::string& raw = request->raw_input_contents(i);
    if (!raw.empty()) std::memcpy(region->data() + offsets[static_cast<size_t>(i)], raw.data(), raw.size());
  }
  const Status registered = client.RegisterSystemSharedMemory(name, region->key(), 0, region->size());
  if (!registered.ok()) {
    return Status(registered.code(), "registering shared-memory region '" + name + "' over " + client.transport() +
                                         ": " + registered.message());
  }
  for (int i = 0; i < n; ++i) {
    SetShmParameters(request->mutable_inputs(i), name, request->raw_input_contents(i).size(),
                     offsets[static_cast<size_t>(i)]);
  }
  request->clear_raw_input_contents();
  return std::unique_ptr<ShmInputs>(new ShmInputs(&client, name, std::move(region)));
}

ShmInputs::~ShmInputs() {
  (void)client_->UnregisterSystemSharedMemory(name_, CallOptions{std::chrono::milliseconds(5000)});
}  // region_ goes next: unmapped and unlinked

}  // namespace es::client
