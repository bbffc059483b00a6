#include "clients/client.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <utility>

#include "common/errno_text.h"

namespace es::client {
namespace {

using inference::GRPCInferenceService;

// Runs one blocking unary call with a deadline; `rpc` is the stub method.
template <typename Request, typename Response, typename Rpc>
Result<Response> Unary(const Client& client, Rpc rpc, const Request& request, const CallOptions& call) {
  grpc::ClientContext ctx;
  client.SetDeadline(&ctx, call);
  Response response;
  grpc::Status status = (client.stub().*rpc)(&ctx, request, &response);
  if (!status.ok()) return Status::FromGrpc(status);
  return response;
}

// State of one asynchronous ModelInfer; deletes itself when it completes.
struct AsyncCall {
  grpc::ClientContext ctx;
  std::shared_ptr<const inference::ModelInferRequest> request;
  inference::ModelInferResponse response;
  Client::InferCallback done;
};

}  // namespace

std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(CodeName(code_)) + ": " + message_;
}

const char* CodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK: return "OK";
    case grpc::StatusCode::CANCELLED: return "CANCELLED";
    case grpc::StatusCode::UNKNOWN: return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED: return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND: return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS: return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED: return "PERMISSION_DENIED";
    case grpc::StatusCode::UNAUTHENTICATED: return "UNAUTHENTICATED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION: return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED: return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE: return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED: return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL: return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE: return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS: return "DATA_LOSS";
    default: return "UNKNOWN_CODE";
  }
}

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address, const ClientOptions& options) {
  grpc::ChannelArguments args;
  // A subchannel pool of this channel's own: a separate TCP connection.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetMaxReceiveMessageSize(options.max_receive_bytes);
  args.SetMaxSendMessageSize(-1);
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  if (options.ssl) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = options.ssl_root_certs;
    ssl.pem_cert_chain = options.ssl_cert_chain;
    ssl.pem_private_key = options.ssl_private_key;
    credentials = grpc::SslCredentials(ssl);
  }
  return grpc::CreateCustomChannel(address, credentials, args);
}

Status ReadTlsFiles(const std::string& ca_file, const std::string& cert_file, const std::string& key_file,
                    ClientOptions* options) {
  if (cert_file.empty() != key_file.empty()) {
    return Status(grpc::StatusCode::INVALID_ARGUMENT,
                  "a client certificate needs its key and a key its certificate (both --ssl-cert and --ssl-key)");
  }
  // Certificates are kilobytes; a bound keeps a wrong path (a device, a
  // huge file) from being read whole.
  constexpr std::streamsize kMaxBytes = 1 << 20;
  for (const auto& [path, out] : {std::pair<const std::string*, std::string*>{&ca_file, &options->ssl_root_certs},
                                  {&cert_file, &options->ssl_cert_chain},
                                  {&key_file, &options->ssl_private_key}}) {
    if (path->empty()) continue;
    std::ifstream in(*path, std::ios::binary);
    if (!in) {
      return Status(grpc::StatusCode::INVALID_ARGUMENT, "cannot open '" + *path + "': " + es::ErrnoText(errno));
    }
    std::string text(static_cast<size_t>(kMaxBytes) + 1, '\0');
    in.read(text.data(), kMaxBytes + 1);
    text.resize(static_cast<size_t>(in.gcount()));
    if (in.bad() || text.size() > static_cast<size_t>(kMaxBytes) || text.find("-----BEGIN ") == std::string::npos) {
      return Status(grpc::StatusCode::INVALID_ARGUMENT, "'" + *path + "' is not a PEM file");
    }
    *out = std::move(text);
  }
  options->ssl = true;
  return Status();
}

void AddCallCredentials(grpc::ClientContext* ctx, const ClientOptions& options) {
  if (options.token.empty()) return;
  std::string value = "Bearer ";
  value += options.token;
  ctx->AddMetadata("authorization", value);
}

std::unique_ptr<Client> Client::Create(const std::string& address, const ClientOptions& options) {
  return std::make_unique<Client>(MakeChannel(address, options), options);
}

Client::Client(std::shared_ptr<grpc::Channel> channel, const ClientOptions& options)
    : channel_(std::move(channel)), stub_(GRPCInferenceService::NewStub(channel_)), options_(options) {}

void Client::SetDeadline(grpc::ClientContext* ctx, const CallOptions& call) const {
  const auto timeout = call.timeout.count() > 0 ? call.timeout : options_.timeout;
  ctx->set_deadline(std::chrono::system_clock::now() + timeout);
  AddCallCredentials(ctx, options_);
}

Result<bool> Client::ServerLive(const CallOptions& call) const {
  ES_ASSIGN_OR_RETURN(const auto r, Unary<inference::ServerLiveRequest, inference::ServerLiveResponse>(
      *this, &GRPCInferenceService::Stub::ServerLive, inference::ServerLiveRequest(), call));
  return r.live();
}

Result<bool> Client::ServerReady(const CallOptions& call) const {
  ES_ASSIGN_OR_RETURN(const auto r, Unary<inference::ServerReadyRequest, inference::ServerReadyResponse>(
      *this, &GRPCInferenceService::Stub::ServerReady, inference::ServerReadyRequest(), call));
  return r.ready();
}

Result<bool> Client::ModelReady(const std::string& model, const std::string& version, const CallOptions& call) const {
  inference::ModelReadyRequest request;
  request.set_name(model);
  request.set_version(version);
  ES_ASSIGN_OR_RETURN(const auto r, Unary<inference::ModelReadyRequest, inference::ModelReadyResponse>(
      *this, &GRPCInferenceService::Stub::ModelReady, request, call));
  return r.ready();
}

Result<inference::ServerMetadataResponse> Client::ServerMetadata(const CallOptions& call) const {
  return Unary<inference::ServerMetadataRequest, inference::ServerMetadataResponse>(
      *this, &GRPCInferenceService::Stub::ServerMetadata, inference::ServerMetadataRequest(), call);
}

Result<inference::ModelMetadataResponse> Client::ModelMetadata(const std::string& model, const std::string& version,
                                                               const CallOptions& call) const {
  inference::ModelMetadataRequest request;
  request.set_name(model);
  request.set_version(version);
  return Unary<inference::ModelMetadataRequest, inference::ModelMetadataResponse>(
      *this, &GRPCInferenceService::Stub::ModelMetadata, request, call);
}

Result<inference::RepositoryIndexResponse> Client::RepositoryIndex(bool ready_only, const CallOptions& call) const {
  inference::RepositoryIndexRequest request;
  request.set_ready(ready_only);
  return Unary<inference::RepositoryIndexRequest, inference::RepositoryIndexResponse>(
      *this, &GRPCInferenceService::Stub::RepositoryIndex, request, call);
}

Result<inference::ModelStatisticsResponse> Client::ModelStatistics(const std::string& model,
                                                                   const std::string& version,
                                                                   const CallOptions& call) const {
  inference::ModelStatisticsRequest request;
  request.set_name(model);
  request.set_version(version);
  return Unary<inference::ModelStatisticsRequest, inference::ModelStatisticsResponse>(
      *this, &GRPCInferenceService::Stub::ModelStatistics, request, call);
}

Result<inference::ModelInferResponse> Client::Infer(const inference::ModelInferRequest& request,
                                                    const CallOptions& call) const {
  return Unary<inference::ModelInferRequest, inference::ModelInferResponse>(
      *this, &GRPCInferenceService::Stub::ModelInfer, request, call);
}

void Client::InferAsync(inference::ModelInferRequest request, InferCallback done, const CallOptions& call) const {
  InferAsync(std::make_shared<const inference::ModelInferRequest>(std::move(request)), std::move(done), call);
}

void Client::InferAsync(std::shared_ptr<const inference::ModelInferRequest> request, InferCallback done,
                        const CallOptions& call) const {
  auto* state = new AsyncCall;
  SetDeadline(&state->ctx, call);
  state->request = std::move(request);
  state->done = std::move(done);
  stub_->async()->ModelInfer(&state->ctx, state->request.get(), &state->response, [state](grpc::Status status) {
    // The call's state (its ClientContext holds a reference to the channel)
    // goes before the user's callback runs: once that callback has run, the
    // user may destroy the Client, and the last reference to a channel must
    // never be dropped on one of gRPC's callback threads (its destructor
    // joins them).
    InferCallback callback = std::move(state->done);
    inference::ModelInferResponse response = std::move(state->response);
    delete state;
    if (status.ok()) {
      callback(Status(), std::move(response));
    } else {
      callback(Status::FromGrpc(status), inference::ModelInferResponse());
    }
  });
}

std::future<Result<inference::ModelInferResponse>> Client::InferFuture(inference::ModelInferRequest request,
                                                                       const CallOptions& call) const {
  auto promise = std::make_shared<std::promise<Result<inference::ModelInferResponse>>>();
  auto future = promise->get_future();
  InferAsync(
      std::move(request),
      [promise](Status status, inference::ModelInferResponse response) {
        if (status.ok()) {
          promise->set_value(std::move(response));
        } else {
          promise->set_value(std::move(status));
        }
      },
      call);
  return future;
}

}  // namespace es::client
