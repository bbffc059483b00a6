// es::client::Client: a KServe v2 gRPC client (inference.GRPCInferenceService),
// usable against ensemble-server, Triton or any KServe v2 server.
//
//   auto client = es::client::Client::Create("127.0.0.1:8001");
//   auto live = client->ServerLive();            // Result<bool>
//   inference::ModelInferRequest req;
//   req.set_model_name("demo_ensemble");
//   es::client::AddInput<float>(&req, "input", {1, 1, 28, 28}, pixels);
//   auto resp = client->Infer(req);              // Result<ModelInferResponse>
//   auto probs = es::client::GetOutput<float>(*resp, "probabilities");
//
// Contract:
//  - Every call carries a deadline: CallOptions::timeout, else the client's
//    ClientOptions::timeout. Calls fail fast (no wait-for-ready): an
//    unreachable server is UNAVAILABLE at once, not at the deadline.
//  - Errors are the server's gRPC status code and message, unchanged; a
//    boolean probe (live/ready) answers false only when the server says so.
//  - InferAsync runs the callback exactly once, on a gRPC-owned thread,
//    possibly before InferAsync returns; it must not block for long (it
//    holds one of gRPC's callback threads). The Client must outlive its
//    calls in flight (the destructor does not wait for them), and must not
//    be destroyed inside a callback (gRPC would join its own thread).
//  - Thread-safe: one Client may be shared by any number of threads.
//  - TLS and tokens: ClientOptions::ssl (with ReadTlsFiles) and ::token;
//    every call of a Client carries the token.
//  - One Client is one channel, and every channel MakeChannel() returns is
//    a connection of its own (a local subchannel pool: gRPC never shares a
//    TCP connection between two of them).
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <string>

#include "clients/status.h"
#include "clients/tensor.h"
#include "proto/grpc_service.grpc.pb.h"

namespace es::client {

struct ClientOptions {
  std::chrono::milliseconds timeout{30000};  // default deadline of every call
  // Largest message received (responses); -1 = no limit.
  int max_receive_bytes = -1;
  // TLS (grpc::SslCredentials) when `ssl`; the PEM texts, not paths (see
  // ReadTlsFiles). Empty root_certs = gRPC's default roots (the system's).
  // cert_chain and private_key together: the client certificate of mTLS.
  bool ssl = false;
  // ({} initializers: aggregate initialization with the first fields only,
  // ClientOptions{timeout}, stays free of missing-initializer warnings.)
  std::string ssl_root_certs{};
  std::string ssl_cert_chain{};
  std::string ssl_private_key{};
  // Bearer token: every call carries `authorization: Bearer TOKEN` (empty =
  // none). Per-call metadata, so it works on plaintext channels too (where
  // it is readable on the wire: use TLS beyond loopback).
  std::string token{};
};

// Reads the PEM files named (each may be empty = not used) into *options
// and sets options->ssl. An error (INVALID_ARGUMENT) names the file that
// cannot be read, and a cert without a key (or a key without a cert).
Status ReadTlsFiles(const std::string& ca_file, const std::string& cert_file, const std::string& key_file,
                    ClientOptions* options);

// Adds options.token's `authorization` metadata to `ctx` (nothing when the
// token is empty). For contexts of raw or generic stub calls; the Client's
// own calls (and SetDeadline) add it already.
void AddCallCredentials(grpc::ClientContext* ctx, const ClientOptions& options);

struct CallOptions {
  // 0 = the client's default.
  std::chrono::milliseconds timeout{0};
};

// A channel to `address` ("HOST:PORT") with the options' arguments: TLS
// when options.ssl, plaintext otherwise.
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address, const ClientOptions& options = {});

class Client {
 public:
  using InferCallback = std::function<void(Status, inference::ModelInferResponse)>;

  static std::unique_ptr<Client> Create(const std::string& address, const ClientOptions& options = {});
  Client(std::shared_ptr<grpc::Channel> channel, const ClientOptions& options = {});

  Result<bool> ServerLive(const CallOptions& call = {}) const;
  Result<bool> ServerReady(const CallOptions& call = {}) const;
  Result<bool> ModelReady(const std::string& model, const std::string& version = "",
                          const CallOptions& call = {}) const;
  Result<inference::ServerMetadataResponse> ServerMetadata(const CallOptions& call = {}) const;
  Result<inference::ModelMetadataResponse> ModelMetadata(const std::string& model, const std::string& version = "",
                                                         const CallOptions& call = {}) const;
  Result<inference::RepositoryIndexResponse> RepositoryIndex(bool ready_only = false,
                                                             const CallOptions& call = {}) const;
  // `model` empty: every model.
  Result<inference::ModelStatisticsResponse> ModelStatistics(const std::string& model = "",
                                                             const std::string& version = "",
                                                             const CallOptions& call = {}) const;

  Result<inference::ModelInferResponse> Infer(const inference::ModelInferRequest& request,
                                              const CallOptions& call = {}) const;
  // Asynchronous ModelInfer (gRPC callback API). The request is moved into
  // the call (use a shared one with the overload below to avoid a copy).
  void InferAsync(inference::ModelInferRequest request, InferCallback done, const CallOptions& call = {}) const;
  void InferAsync(std::shared_ptr<const inference::ModelInferRequest> request, InferCallback done,
                  const CallOptions& call = {}) const;
  // The same, as a future.
  std::future<Result<inference::ModelInferResponse>> InferFuture(inference::ModelInferRequest request,
                                                                 const CallOptions& call = {}) const;

  const std::shared_ptr<grpc::Channel>& channel() const { return channel_; }
  const ClientOptions& options() const { return options_; }
  inference::GRPCInferenceService::Stub& stub() const { return *stub_; }
  // Sets `ctx`'s deadline from `call` (or the default) and the client's
  // token metadata (AddCallCredentials); for raw stub calls.
  void SetDeadline(grpc::ClientContext* ctx, const CallOptions& call) const;

 private:
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<inference::GRPCInferenceService::Stub> stub_;
  ClientOptions options_;
};

}  // namespace es::client
