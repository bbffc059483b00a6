// HttpRoutes: the KServe v2 / Triton HTTP/REST API over the same handlers as
// gRPC (KServeAnswers, InferCalls, SharedMemoryRegistry: the kserve/ layer),
// independent of the connection that carried the request (http_server.h).
//
// Routes (Triton's paths; {v} optional as /versions/{v}):
//   GET  /v2/health/live, /v2/health/ready           200 or 400, empty body   (health)
//   GET  /v2                                          server metadata          (infer)
//   GET  /v2/models/{m}[/versions/{v}]                model metadata           (infer)
//   GET  /v2/models/{m}[/versions/{v}]/ready          200 or 400, empty body   (health)
//   GET  /v2/models/{m}[/versions/{v}]/config         the model's config       (infer)
//   GET  /v2/models[/{m}[/versions/{v}]]/stats        statistics               (infer)
//   POST /v2/models/{m}[/versions/{v}]/infer          inference (http_infer_codec.h) (infer)
//   POST /v2/repository/index                         [{name, version, state, reason}] (infer)
//   POST /v2/repository/models/{m}/load | /unload     empty body on success    (admin)
//   GET  /v2/systemsharedmemory[/region/{r}]/status   [{name, key, offset, byte_size}] (admin)
//   POST /v2/systemsharedmemory/region/{r}/register   body {key, offset, byte_size}    (admin)
//   POST /v2/systemsharedmemory[/region/{r}]/unregister                               (admin)
// Every route checks the Authorization header with AuthPolicy::Check for the
// access in parentheses first. Errors are {"error": "..."} with the HTTP
// status of the gRPC code (HttpStatusFor); an unknown path is 404, a known
// path with the wrong method 405.
//
// Thread safety: Handle from any thread, concurrently.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "common/status.h"
#include "server/security/auth_policy.h"
#include "server/kserve/kserve_answers.h"
#include "server/kserve/log_settings_reply.h"
#include "server/kserve/trace_settings_reply.h"
#include "server/experiment/experiments.h"
#include "server/kserve/infer_calls.h"
#include "server/shm/shm_registry.h"

namespace es {

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string target;  // path and query, as sent
  std::string authorization;
  // Inference-Header-Content-Length as sent ("" = absent).
  std::string inference_header_length;
  // Every header as "name: value\n" lines, names lower-case (for the ones no
  // field above holds, e.g. an experiment's sticky_by).
  std::string headers;
  // The body, inflated already when it was sent compressed (http_server.h).
  std::string body;
  // Set by the transport once the client has closed its connection while
  // the request is being handled (null: the transport cannot tell). An
  // inference run takes it as its cancellation, as a gRPC call's.
  std::shared_ptr<std::atomic<bool>> client_gone;
};

// The value of header `name` (lower-case) in `request.headers`; "" when absent.
std::string HeaderOf(const HttpRequest& request, const std::string& name);

struct HttpResponse {
  int status = 200;
  std::string body;
  std::string content_type = "application/json";
  std::optional<size_t> inference_header_length;  // binary outputs follow the JSON
  std::string allow;                              // 405: the methods the path takes
  // Kept until the response has been written (an inference call's place).
  std::shared_ptr<void> hold;
  // Set: fills the response before it is written, on the connection's I/O
  // thread (an inference answer is encoded there, not on the host's
  // completion thread that reported it).
  std::function<void(HttpResponse&)> render;
};

// The HTTP status of a gRPC code: INVALID_ARGUMENT/FAILED_PRECONDITION/
// OUT_OF_RANGE/CANCELLED 400, UNAUTHENTICATED 401, PERMISSION_DENIED 403,
// NOT_FOUND 404, ALREADY_EXISTS/ABORTED 409, RESOURCE_EXHAUSTED 429 (busy:
// retry later), UNIMPLEMENTED 501, UNAVAILABLE 503, DEADLINE_EXCEEDED 504,
// the rest 500.
int HttpStatusFor(StatusCode code);

// {"error": message} with HttpStatusFor(status.code()).
HttpResponse HttpError(const Status& status);

class HttpRoutes {
 public:
  using Reply = std::function<void(HttpResponse)>;

  // `auth` and `shm` may be null (no authentication; shared-memory routes
  // answer UNAVAILABLE); so may `log_settings` (no /v2/logging route, no
  // "logging" extension) and `trace_settings` (no trace/setting routes, no
  // "trace" extension). The pointers must outlive the routes.
  HttpRoutes(KServeAnswers* answers, InferCalls* calls, const AuthPolicy* auth, SharedMemoryRegistry* shm,
             LogSettingsReply* log_settings = nullptr, TraceSettingsReply* trace_settings = nullptr);

  // The /v2/models/{m}/experiment route (GET: its status; POST, admin: a
  // new experiment, the body's fields as config.yaml's `experiment:`
  // section), answered from `experiments` for the models `catalog` finds.
  // Unset: no such route. Before the first request; both outlive the routes.
  void SetExperiments(Experiments* experiments, const ModelCatalog* catalog) {
    experiments_ = experiments;
    catalog_ = catalog;
  }

  // Answers `request` through `reply`, exactly once, from any thread (maybe
  // before Handle returns).
  void Handle(std::shared_ptr<HttpRequest> request, Reply reply);

 private:
  // The method first (405 naming `allow`), then the token (401/403): true
  // when the route may run, else `reply` has been answered.
  bool Admit(const HttpRequest& req, bool method_ok, const char* allow, Access access, const Reply& reply) const;
  void Infer(std::shared_ptr<HttpRequest> request, const std::string& model, const std::string& version, Reply reply);
  // GET /v2/models/{m}[/versions/{v}][/ready|/config|/stats]: `what` is ""
  // (metadata), "ready", "config" or "stats" (every model's when `model` is "").
  HttpResponse ModelAnswer(const std::string& what, const std::string& model, const std::string& version) const;
  HttpResponse RepositoryIndex(const HttpRequest& req) const;
  // POST /v2/repository/models/{m}/load or /unload.
  void ModelControl(const HttpRequest& req, const std::string& model, bool load, const Reply& reply);
  HttpResponse SharedMemory(const HttpRequest& request, const std::string& region, const std::string& action);
  // GET /v2/logging (read) or POST (`update`: the body's settings), Triton's
  // logging extension (kserve/log_settings_reply.h).
  HttpResponse Logging(const HttpRequest& req, bool update) const;
  // GET or POST /v2/trace/setting (`model` "") and
  // /v2/models/{model}/trace/setting: Triton's trace extension
  // (kserve/trace_settings_reply.h); values a string, a list of strings or
  // null (clear).
  HttpResponse TraceSetting(const HttpRequest& req, const std::string& model, bool update) const;
  HttpResponse Experiment(const HttpRequest& req, const std::string& model, bool update) const;

  KServeAnswers* answers_;
  InferCalls* calls_;
  const AuthPolicy* auth_;
  SharedMemoryRegistry* shm_;
  LogSettingsReply* log_settings_;  // may be null
  TraceSettingsReply* trace_settings_;  // may be null
  Experiments* experiments_ = nullptr;  // may be null
  const ModelCatalog* catalog_ = nullptr;
};

}  // namespace es
