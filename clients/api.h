// es::client::Api: the KServe v2 calls ensemble-cli and ensemble-loadgen
// make, whatever the transport: GrpcApi (the gRPC Client) or HttpClient
// (KServe v2 HTTP/REST, clients/http_client.h). Both speak the same protos
// (inference::ModelInferRequest / ModelInferResponse, the metadata, index
// and statistics answers), so the tools' printing and measuring code is
// shared and an answer reads the same, byte for byte, on either transport.
//
// Contract:
//  - Every call has a deadline: CallOptions::timeout, else the options'
//    ClientOptions::timeout.
//  - Errors carry a gRPC status code; over HTTP the code is the one the
//    HTTP status stands for (see http_client.h) and the message the
//    server's {"error": ...} text, unchanged.
//  - live / ready answer false only when the server says so.
//  - Thread safety: see each implementation (GrpcApi: any number of
//    threads; HttpClient: calls are serialized on its one connection).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "clients/client.h"
#include "clients/status.h"

namespace es::client {

class Api {
 public:
  virtual ~Api() = default;

  virtual Result<bool> ServerLive(const CallOptions& call = {}) const = 0;
  virtual Result<bool> ServerReady(const CallOptions& call = {}) const = 0;
  virtual Result<bool> ModelReady(const std::string& model, const std::string& version = "",
                                  const CallOptions& call = {}) const = 0;
  virtual Result<inference::ServerMetadataResponse> ServerMetadata(const CallOptions& call = {}) const = 0;
  virtual Result<inference::ModelMetadataResponse> ModelMetadata(const std::string& model,
                                                                 const std::string& version = "",
                                                                 const CallOptions& call = {}) const = 0;
  virtual Result<inference::RepositoryIndexResponse> RepositoryIndex(bool ready_only = false,
                                                                     const CallOptions& call = {}) const = 0;
  // `model` empty: every model.
  virtual Result<inference::ModelStatisticsResponse> ModelStatistics(const std::string& model = "",
                                                                     const std::string& version = "",
                                                                     const CallOptions& call = {}) const = 0;
  virtual Result<inference::ModelInferResponse> Infer(const inference::ModelInferRequest& request,
                                                      const CallOptions& call = {}) const = 0;

  // Triton's system shared-memory extension: registers bytes [offset,
  // offset + byte_size) of the POSIX shared-memory object `key` as region
  // `name`; unregisters region `name` ("" = every region). Admin calls
  // when the server checks tokens.
  virtual Status RegisterSystemSharedMemory(const std::string& name, const std::string& key, uint64_t offset,
                                            uint64_t byte_size, const CallOptions& call = {}) const = 0;
  virtual Status UnregisterSystemSharedMemory(const std::string& name, const CallOptions& call = {}) const = 0;

  // The gRPC client behind this Api, or null (HTTP): for what only gRPC
  // offers (ModelStreamInfer).
  virtual const Client* grpc() const { return nullptr; }
  // "gRPC" or "HTTP", for messages.
  virtual const char* transport() const = 0;
};

// The gRPC Client as an Api.
class GrpcApi final : public Api {
 public:
  explicit GrpcApi(std::unique_ptr<Client> client) : client_(std::move(client)) {}

  Result<bool> ServerLive(const CallOptions& call = {}) const override { return client_->ServerLive(call); }
  Result<bool> ServerReady(const CallOptions& call = {}) const override { return client_->ServerReady(call); }
  Result<bool> ModelReady(const std::string& model, const std::string& version = "",
                          const CallOptions& call = {}) const override {
    return client_->ModelReady(model, version, call);
  }
  Result<inference::ServerMetadataResponse> ServerMetadata(const CallOptions& call = {}) const override {
    return client_->ServerMetadata(call);
  }
  Result<inference::ModelMetadataResponse> ModelMetadata(const std::string& model, const std::string& version = "",
                                                         const CallOptions& call = {}) const override {
    return client_->ModelMetadata(model, version, call);
  }
  Result<inference::RepositoryIndexResponse> RepositoryIndex(bool ready_only = false,
                                                             const CallOptions& call = {}) const override {
    return client_->RepositoryIndex(ready_only, call);
  }
  Result<inference::ModelStatisticsResponse> ModelStatistics(const std::string& model = "",
                                                             const std::string& version = "",
                                                             const CallOptions& call = {}) const override {
    return client_->ModelStatistics(model, version, call);
  }
  Result<inference::ModelInferResponse> Infer(const inference::ModelInferRequest& request,
                                              const CallOptions& call = {}) const override {
    return client_->Infer(request, call);
  }
  // In clients/shm_region.cc, with the stub calls they make.
  Status RegisterSystemSharedMemory(const std::string& name, const std::string& key, uint64_t offset,
                                    uint64_t byte_size, const CallOptions& call = {}) const override;
  Status UnregisterSystemSharedMemory(const std::string& name, const CallOptions& call = {}) const override;
  const Client* grpc() const override { return client_.get(); }
  const char* transport() const override { return "gRPC"; }

 private:
  std::unique_ptr<Client> client_;
};

}  // namespace es::client
