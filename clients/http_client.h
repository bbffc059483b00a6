// es::client::HttpClient: a small synchronous KServe v2 HTTP/REST client
// (Triton's paths and binary tensor extension) on Boost.Beast, speaking the
// same protos as the gRPC Client (clients/api.h), for `ensemble-cli --http`
// and `ensemble-loadgen --http`.
//
//   auto client = es::client::HttpClient::Create("127.0.0.1:8000", options);
//   if (!client.ok()) ...;                        // bad TLS material
//   auto resp = (*client)->Infer(request);        // Result<ModelInferResponse>
//
// Contract:
//  - One HTTP/1.1 keep-alive connection, opened on the first call and
//    reopened when the server closed it (a call on a reused connection that
//    fails before any byte of the answer came is sent once more on a new
//    one: the server's idle timeout must not fail a call). Calls are
//    serialized on it (a mutex): thread-safe, but one call at a time; use
//    one HttpClient per concurrent caller.
//  - Every call has a deadline (CallOptions::timeout, else
//    ClientOptions::timeout) covering connect, TLS handshake, request and
//    answer; past it the connection is closed and the call is
//    DEADLINE_EXCEEDED (name resolution, getaddrinfo, is the one step it
//    does not bound: give an IP address where that matters). A server that
//    cannot be reached is UNAVAILABLE.
//  - TLS when ClientOptions::ssl: the server's certificate is checked
//    against ssl_root_certs (else the system's CAs) and its name against the
//    host of the address (IP or DNS name); ssl_cert_chain + ssl_private_key
//    are the client certificate (mTLS). ClientOptions::token is sent as
//    `Authorization: Bearer TOKEN` on every call.
//  - Infer sends inputs as binary tensors (raw_input_contents after the JSON,
//    Inference-Header-Content-Length) and asks every output back binary, so
//    outputs are byte-exact. Inputs that name a shared-memory region carry
//    no data; outputs written into one come back with an empty
//    raw_output_contents entry. Typed `contents` are not sent (INVALID_ARGUMENT:
//    use raw_input_contents). Parameters of the request, its inputs and
//    outputs pass as JSON (bool, int64, uint64, double, string) both ways.
//  - Errors: the server's {"error": "..."} text (else the start of the
//    body) with the code of the HTTP status: 400 INVALID_ARGUMENT, 401
//    UNAUTHENTICATED, 403 PERMISSION_DENIED, 404 NOT_FOUND, 405/501
//    UNIMPLEMENTED, 409 ALREADY_EXISTS, 413/429/431 RESOURCE_EXHAUSTED, 503
//    UNAVAILABLE, 504 DEADLINE_EXCEEDED, other 5xx INTERNAL, other 4xx
//    INVALID_ARGUMENT. (The server answers 400 for FAILED_PRECONDITION,
//    OUT_OF_RANGE and CANCELLED too: over HTTP they read INVALID_ARGUMENT.)
//    An answer that is not what the protocol allows (bad JSON, binary sizes
//    that do not add up) is INTERNAL naming what was wrong; answers are
//    untrusted input.
//  - live / ready: 200 true, 400 false (the server's "not ready").
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "clients/api.h"

namespace es::client {

// The Triton/KServe HTTP body of `request` (binary inputs, outputs asked
// binary): JSON then the inputs' bytes; *header_length = the JSON's length.
Status EncodeHttpInferRequest(const inference::ModelInferRequest& request, std::string* body, size_t* header_length);
// An answer body back into a ModelInferResponse (header_length: the
// answer's Inference-Header-Content-Length, none = all JSON).
Status DecodeHttpInferResponse(std::string_view body, std::optional<uint64_t> header_length,
                               inference::ModelInferResponse* out);
// The code an HTTP status stands for (see the contract above); OK for 2xx.
grpc::StatusCode CodeOfHttpStatus(int http_status);
// "/v2/models/NAME[/versions/V]" with NAME and V percent-encoded.
std::string ModelPath(const std::string& model, const std::string& version);
// "/v2/systemsharedmemory/region/NAME" with NAME percent-encoded.
std::string ShmRegionPath(const std::string& name);

class HttpClient final : public Api {
 public:
  // `address` is "HOST:PORT". INVALID_ARGUMENT for an address without a
  // port or TLS material OpenSSL refuses (the message names which).
  static Result<std::unique_ptr<HttpClient>> Create(const std::string& address, const ClientOptions& options = {});
  ~HttpClient() override;
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  Result<bool> ServerLive(const CallOptions& call = {}) const override;
  Result<bool> ServerReady(const CallOptions& call = {}) const override;
  Result<bool> ModelReady(const std::string& model, const std::string& version = "",
                          const CallOptions& call = {}) const override;
  Result<inference::ServerMetadataResponse> ServerMetadata(const CallOptions& call = {}) const override;
  Result<inference::ModelMetadataResponse> ModelMetadata(const std::string& model, const std::string& version = "",
                                                         const CallOptions& call = {}) const override;
  Result<inference::RepositoryIndexResponse> RepositoryIndex(bool ready_only = false,
                                                             const CallOptions& call = {}) const override;
  Result<inference::ModelStatisticsResponse> ModelStatistics(const std::string& model = "",
                                                             const std::string& version = "",
                                                             const CallOptions& call = {}) const override;
  Result<inference::ModelInferResponse> Infer(const inference::ModelInferRequest& request,
                                              const CallOptions& call = {}) const override;
  // POST /v2/systemsharedmemory/region/{name}/register ({key, offset,
  // byte_size}) and .../unregister (without /region/{name} for "": all).
  Status RegisterSystemSharedMemory(const std::string& name, const std::string& key, uint64_t offset,
                                    uint64_t byte_size, const CallOptions& call = {}) const override;
  Status UnregisterSystemSharedMemory(const std::string& name, const CallOptions& call = {}) const override;
  const char* transport() const override { return "HTTP"; }

  // A POST of a body made once by EncodeHttpInferRequest (the load
  // generator sends the same body again and again): the answer is checked
  // (status; the body is read whole) but not decoded. `path` is
  // ModelPath(...) + "/infer".
  Status PostInfer(const std::string& path, const std::string& body, size_t header_length,
                   const CallOptions& call = {}) const;

  // Whether the connection is open now (it may still be closed by the peer).
  bool connected() const;

 private:
  struct Impl;
  explicit HttpClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// An Api on `address`: HttpClient when `http`, else the gRPC Client.
Result<std::unique_ptr<Api>> MakeApi(const std::string& address, const ClientOptions& options, bool http);

}  // namespace es::client
