#include "server/http/http_routes.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <vector>

#include "common/base64.h"
#include "server/http/http_infer_codec.h"
#include "server/http/http_proto_json.h"
#include "server/kserve/client_json.h"

namespace es {
namespace {

using json = nlohmann::ordered_json;

HttpResponse JsonResponse(const json& body) {
  HttpResponse r;
  r.body = JsonText(body);
  return r;
}

HttpResponse Empty(int status) {
  HttpResponse r;
  r.status = status;
  r.content_type.clear();
  return r;
}

HttpResponse MethodNotAllowed(const HttpRequest& request, const char* allow) {
  HttpResponse r = HttpError(Status::InvalidArgument("method " + request.method + " is not allowed on " +
                                                     request.target + " (use " + allow + ")"));
  r.status = 405;
  r.allow = allow;
  return r;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The path's segments after the leading '/', percent-decoded (tritonclient
// quotes model names); nullopt for a bad escape. The query string is ignored.
std::optional<std::vector<std::string>> Segments(const std::string& target) {
  std::string path = target.substr(0, target.find('?'));
  std::vector<std::string> out;
  size_t i = 0;
  while (i < path.size()) {
    if (path[i] == '/') {
      ++i;
      continue;
    }
    std::string segment;
    for (; i < path.size() && path[i] != '/'; ++i) {
      if (path[i] != '%') {
        segment.push_back(path[i]);
        continue;
      }
      if (i + 2 >= path.size()) return std::nullopt;
      const int hi = HexValue(path[i + 1]), lo = HexValue(path[i + 2]);
      if (hi < 0 || lo < 0) return std::nullopt;
      segment.push_back(static_cast<char>(hi * 16 + lo));
      i += 2;
    }
    out.push_back(std::move(segment));
  }
  return out;
}

// The body as a JSON object; an empty body is an empty object.
StatusOr<json> JsonBody(const HttpRequest& request) {
  if (request.body.find_first_not_of(" \t\r\n") == std::string::npos) return json::object();
  ES_ASSIGN_OR_RETURN(json body, ParseClientJson(request.body, "the request body"));
  if (!body.is_object()) return Status::InvalidArgument("the request body must be a JSON object");
  return body;
}

// Triton's {"parameters": {...}} of load/unload as the proto's map; a
// `file:<path>` parameter (a model file of an upload) is base64 text in
// JSON, bytes in the proto (the body's limit bounds it; the upload checks
// the files' total against limits.max_request_bytes).
Status RepositoryParameters(const json& body,
                            google::protobuf::Map<std::string, inference::ModelRepositoryParameter>* out) {
  const auto params = body.find("parameters");
  if (params == body.end()) return Status::Ok();
  if (!params->is_object()) return Status::InvalidArgument("\"parameters\" must be an object");
  for (const auto& [key, value] : params->items()) {
    auto& p = (*out)[key];
    if (key.rfind("file:", 0) == 0) {
      if (!value.is_string()) return Status::InvalidArgument("parameter '" + key + "' must be the file as base64 text");
      StatusOr<std::string> bytes = Base64Decode(value.get_ref<const std::string&>(), value.get_ref<const std::string&>().size());
      if (!bytes.ok()) return Status(bytes.status().code(), "parameter '" + key + "': " + bytes.status().message());
      p.set_bytes_param(std::move(bytes).value());
    } else if (value.is_boolean()) {
      p.set_bool_param(value.get<bool>());
    } else if (value.is_number_integer() && !(value.is_number_unsigned() && value.get<uint64_t>() > INT64_MAX)) {
      p.set_int64_param(value.get<int64_t>());
    } else if (value.is_string()) {
      p.set_string_param(value.get<std::string>());
    } else {
      return Status::InvalidArgument("parameter '" + key + "' must be a bool, an integer or a string");
    }
  }
  return Status::Ok();
}

// The tail of a /v2/models/{m}[/versions/{v}][/what] path, parsed.
struct ModelPath {
  std::string model;
  std::string version;
  std::string what;  // "", "ready", "config", "stats", "infer"
  bool ok = false;
};

ModelPath ParseModelPath(const std::vector<std::string>& s) {
  ModelPath p;
  if (s.size() < 3) return p;
  p.model = s[2];
  size_t i = 3;
  if (s.size() >= 5 && s[3] == "versions") {
    p.version = s[4];
    i = 5;
  }
  if (i + 1 < s.size()) return p;
  if (i < s.size()) p.what = s[i];
  p.ok = p.what.empty() || p.what == "ready" || p.what == "config" || p.what == "stats" || p.what == "infer";
  return p;
}

}  // namespace

int HttpStatusFor(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return 200;
    case StatusCode::kInvalidArgument:
    case StatusCode::kCancelled:  // as Triton
    case StatusCode::kFailedPrecondition:
    case StatusCode::kOutOfRange:
      return 400;
    case StatusCode::kUnauthenticated:
      return 401;
    case StatusCode::kPermissionDenied:
      return 403;
    case StatusCode::kNotFound:
      return 404;
    case StatusCode::kAlreadyExists:
    case StatusCode::kAborted:
      return 409;
    case StatusCode::kResourceExhausted:
      return 429;
    case StatusCode::kUnimplemented:
      return 501;
    case StatusCode::kUnavailable:
      return 503;
    case StatusCode::kDeadlineExceeded:
      return 504;
    default:
      return 500;
  }
}

HttpResponse HttpError(const Status& status) {
  HttpResponse r = JsonResponse(json{{"error", status.message()}});
  r.status = HttpStatusFor(status.code());
  return r;
}

HttpRoutes::HttpRoutes(KServeAnswers* answers, InferCalls* calls, const AuthPolicy* auth, SharedMemoryRegistry* shm,
                       LogSettingsReply* log_settings, TraceSettingsReply* trace_settings)
    : answers_(answers),
      calls_(calls),
      auth_(auth),
      shm_(shm),
      log_settings_(log_settings),
      trace_settings_(trace_settings) {}

namespace {

// A per-model request of the KServe protocol, from the path's model and version.
template <typename Request>
Request ModelRequest(const std::string& model, const std::string& version) {
  Request r;
  r.set_name(model);
  r.set_version(version);
  return r;
}

}  // namespace

bool HttpRoutes::Admit(const HttpRequest& req, bool method_ok, const char* allow, Access access,
                       const Reply& reply) const {
  if (!method_ok) {
    reply(MethodNotAllowed(req, allow));
    return false;
  }
  if (Status s = auth_ == nullptr ? Status::Ok() : auth_->Check(req.authorization, access); !s.ok()) {
    reply(HttpError(s));
    return false;
  }
  return true;
}

void HttpRoutes::Handle(std::shared_ptr<HttpRequest> request, Reply reply) {
  const HttpRequest& req = *request;
  const bool get = req.method == "GET", post = req.method == "POST";
  const auto parsed = Segments(req.target);
  if (!parsed) return reply(HttpError(Status::InvalidArgument("bad percent-escape in the path " + req.target)));
  const std::vector<std::string>& s = *parsed;
  const auto not_found = [&] { reply(HttpError(Status::NotFound("no route for " + req.method + " " + req.target))); };
  if (s.empty() || s[0] != "v2") return not_found();

  if (s.size() == 1) {  // GET /v2
    if (!Admit(req, get, "GET", Access::kInfer, reply)) return;
    inference::ServerMetadataResponse meta;
    answers_->AnswerServerMetadata(&meta);
    json body = ProtoToJson(meta);
    body["extensions"].push_back("binary_tensor_data");  // this front end's own
    if (log_settings_ != nullptr) body["extensions"].push_back("logging");
    if (trace_settings_ != nullptr) body["extensions"].push_back("trace");
    return reply(JsonResponse(body));
  }
  if (s[1] == "logging" && s.size() == 2 && log_settings_ != nullptr) {
    if (!Admit(req, get || post, "GET, POST", post ? Access::kAdmin : Access::kInfer, reply)) return;
    return reply(Logging(req, post));
  }
  if (s[1] == "health" && s.size() == 3 && (s[2] == "live" || s[2] == "ready")) {
    if (!Admit(req, get, "GET", Access::kHealth, reply)) return;
    // Triton's answers: 200 when live/ready, 400 when not, no body.
    if (s[2] == "live") return reply(Empty(200));
    return reply(Empty(answers_->ServerIsReady() ? 200 : 400));
  }
  const bool server_trace = s.size() == 3 && s[1] == "trace" && s[2] == "setting";
  const bool model_trace = s.size() == 5 && s[1] == "models" && s[3] == "trace" && s[4] == "setting";
  if ((server_trace || model_trace) && trace_settings_ != nullptr) {
    if (!Admit(req, get || post, "GET, POST", post ? Access::kAdmin : Access::kInfer, reply)) return;
    return reply(TraceSetting(req, model_trace ? s[2] : "", post));
  }
  if (s.size() == 4 && s[1] == "models" && s[3] == "experiment" && experiments_ != nullptr) {
    if (!Admit(req, get || post, "GET, POST", post ? Access::kAdmin : Access::kInfer, reply)) return;
    return reply(Experiment(req, s[2], post));
  }
  if (s[1] == "models" && s.size() == 3 && s[2] == "stats") {  // every model's statistics
    if (!Admit(req, get, "GET", Access::kInfer, reply)) return;
    return reply(ModelAnswer("stats", "", ""));
  }
  if (s[1] == "models") {
    const ModelPath p = ParseModelPath(s);
    if (!p.ok) return not_found();
    if (p.what == "infer") {
      if (!Admit(req, post, "POST", Access::kInfer, reply)) return;
      return Infer(std::move(request), p.model, p.version, std::move(reply));
    }
    if (!Admit(req, get, "GET", p.what == "ready" ? Access::kHealth : Access::kInfer, reply)) return;
    return reply(ModelAnswer(p.what, p.model, p.version));
  }
  if (s[1] == "repository") {
    const bool index = s.size() == 3 && s[2] == "index";
    const bool control = s.size() == 5 && s[2] == "models" && (s[4] == "load" || s[4] == "unload");
    if (!index && !control) return not_found();
    if (!Admit(req, post, "POST", index ? Access::kInfer : Access::kAdmin, reply)) return;
    if (index) return reply(RepositoryIndex(req));
    return ModelControl(req, s[3], s[4] == "load", reply);
  }
  if (s[1] == "systemsharedmemory") {
    // /v2/systemsharedmemory[/region/{r}]/{status|register|unregister}
    std::string region, action;
    if (s.size() == 3) {
      action = s[2];
    } else if (s.size() == 5 && s[2] == "region") {
      region = s[3];
      action = s[4];
    }
    if (action != "status" && action != "unregister" && !(action == "register" && !region.empty())) {
      return not_found();
    }
    const bool is_get = action == "status";
    if (!Admit(req, is_get ? get : post, is_get ? "GET" : "POST", Access::kAdmin, reply)) return;
    return reply(SharedMemory(req, region, action));
  }
  not_found();
}

HttpResponse HttpRoutes::ModelAnswer(const std::string& what, const std::string& model,
                                     const std::string& version) const {
  if (what.empty()) {
    inference::ModelMetadataResponse meta;
    Status st = answers_->AnswerModelMetadata(ModelRequest<inference::ModelMetadataRequest>(model, version), &meta);
    return st.ok() ? JsonResponse(ProtoToJson(meta)) : HttpError(st);
  }
  if (what == "ready") {
    inference::ModelReadyResponse ready;
    Status st = answers_->AnswerModelReady(ModelRequest<inference::ModelReadyRequest>(model, version), &ready);
    return st.ok() ? Empty(ready.ready() ? 200 : 400) : HttpError(st);
  }
  if (what == "config") {
    inference::ModelConfigResponse config;
    Status st = answers_->AnswerModelConfig(ModelRequest<inference::ModelConfigRequest>(model, version), &config);
    // Triton answers the config itself.
    return st.ok() ? JsonResponse(ProtoToJson(config.config())) : HttpError(st);
  }
  inference::ModelStatisticsResponse stats;  // stats (of every model when `model` is empty)
  Status st =
      answers_->AnswerModelStatistics(ModelRequest<inference::ModelStatisticsRequest>(model, version), &stats);
  return st.ok() ? JsonResponse(ProtoToJson(stats, /*all_messages=*/true)) : HttpError(st);
}

HttpResponse HttpRoutes::RepositoryIndex(const HttpRequest& req) const {
  StatusOr<json> body = JsonBody(req);
  if (!body.ok()) return HttpError(body.status());
  inference::RepositoryIndexRequest r;
  if (const auto ready = body->find("ready"); ready != body->end()) {
    if (!ready->is_boolean()) return HttpError(Status::InvalidArgument("\"ready\" must be a bool"));
    r.set_ready(ready->get<bool>());
  }
  inference::RepositoryIndexResponse index;
  answers_->AnswerRepositoryIndex(r, &index);
  json models = json::array();
  for (const auto& m : index.models()) models.push_back(ProtoToJson(m));
  return JsonResponse(models);
}

void HttpRoutes::ModelControl(const HttpRequest& req, const std::string& model, bool load, const Reply& reply) {
  StatusOr<json> body = JsonBody(req);
  if (!body.ok()) return reply(HttpError(body.status()));
  auto done = [reply](const Status& st) { reply(st.ok() ? Empty(200) : HttpError(st)); };
  if (load) {
    inference::RepositoryModelLoadRequest r;
    r.set_model_name(model);
    if (Status st = RepositoryParameters(*body, r.mutable_parameters()); !st.ok()) return reply(HttpError(st));
    return answers_->LoadModel(r, std::move(done));
  }
  inference::RepositoryModelUnloadRequest r;
  r.set_model_name(model);
  if (Status st = RepositoryParameters(*body, r.mutable_parameters()); !st.ok()) return reply(HttpError(st));
  answers_->UnloadModel(r, std::move(done));
}

std::string HeaderOf(const HttpRequest& request, const std::string& name) {
  const std::string key = name + ": ";
  for (size_t at = 0; at < request.headers.size();) {
    const size_t end = std::min(request.headers.find('\n', at), request.headers.size());
    if (request.headers.compare(at, key.size(), key) == 0) return request.headers.substr(at + key.size(), end - at - key.size());
    at = end + 1;
  }
  return "";
}

HttpResponse HttpRoutes::Experiment(const HttpRequest& req, const std::string& model, bool update) const {
  const ModelConfig* config = catalog_->Find(model);
  if (config == nullptr) return HttpError(Status::NotFound("unknown model '" + model + "'"));
  if (update) {
    StatusOr<ExperimentSpec> spec = ParseExperimentText(req.body, model, "the request body");
    if (!spec.ok()) return HttpError(spec.status());
    if (Status st = experiments_->Set(*config, *spec); !st.ok()) return HttpError(st);
  }
  return JsonResponse(experiments_->Describe(*config));
}

HttpResponse HttpRoutes::Logging(const HttpRequest& req, bool update) const {
  inference::LogSettingsRequest r;
  if (update) {
    StatusOr<json> body = JsonBody(req);
    if (!body.ok()) return HttpError(body.status());
    if (!body->is_object()) return HttpError(Status::InvalidArgument("the log settings must be a JSON object"));
    for (const auto& [name, value] : body->items()) {
      auto& v = (*r.mutable_settings())[name];
      if (value.is_boolean()) {
        v.set_bool_param(value.get<bool>());
      } else if (value.is_number_unsigned() && value.get<uint64_t>() <= UINT32_MAX) {
        v.set_uint32_param(static_cast<uint32_t>(value.get<uint64_t>()));
      } else if (value.is_string()) {
        v.set_string_param(value.get<std::string>());
      } else {
        return HttpError(Status::InvalidArgument("log setting '" + name + "': expected a bool, a string or a " +
                                                 "whole number from 0 to 4294967295, got " + value.dump()));
      }
    }
  }
  inference::LogSettingsResponse settings;
  if (Status st = log_settings_->Update(r, &settings); !st.ok()) return HttpError(st);
  json out = json::object();
  for (const auto& [name, v] : settings.settings()) {
    switch (v.parameter_choice_case()) {
      case inference::LogSettingsResponse::SettingValue::kBoolParam: out[name] = v.bool_param(); break;
      case inference::LogSettingsResponse::SettingValue::kUint32Param: out[name] = v.uint32_param(); break;
      default: out[name] = v.string_param(); break;
    }
  }
  return JsonResponse(out);
}

HttpResponse HttpRoutes::TraceSetting(const HttpRequest& req, const std::string& model, bool update) const {
  inference::TraceSettingRequest r;
  r.set_model_name(model);
  if (update) {
    StatusOr<json> body = JsonBody(req);
    if (!body.ok()) return HttpError(body.status());
    if (!body->is_object()) return HttpError(Status::InvalidArgument("the trace settings must be a JSON object"));
    for (const auto& [name, value] : body->items()) {
      auto& v = (*r.mutable_settings())[name];  // null: an empty list (clear)
      if (value.is_string()) {
        v.add_value(value.get<std::string>());
      } else if (value.is_array()) {
        for (const json& item : value) {
          if (!item.is_string()) {
            return HttpError(Status::InvalidArgument("trace setting '" + name + "': expected strings, got " +
                                                     item.dump()));
          }
          v.add_value(item.get<std::string>());
        }
      } else if (!value.is_null()) {
        return HttpError(Status::InvalidArgument("trace setting '" + name +
                                                 "': expected a string, a list of strings or null, got " +
                                                 value.dump()));
      }
    }
  }
  inference::TraceSettingResponse settings;
  if (Status st = trace_settings_->Update(r, &settings); !st.ok()) return HttpError(st);
  json out = json::object();
  for (const auto& [name, v] : settings.settings()) {
    // Triton's shape: trace_level a list, the others a string.
    if (name == "trace_level") {
      out[name] = json(std::vector<std::string>(v.value().begin(), v.value().end()));
    } else {
      out[name] = v.value_size() > 0 ? v.value(0) : "";
    }
  }
  return JsonResponse(out);
}

HttpResponse HttpRoutes::SharedMemory(const HttpRequest& request, const std::string& region,
                                      const std::string& action) {
  if (shm_ == nullptr) return HttpError(Status::Unavailable("system shared memory is not available on this server"));
  if (action == "status") {
    StatusOr<std::vector<SharedMemoryRegistry::RegionInfo>> regions = shm_->List(region);
    if (!regions.ok()) return HttpError(regions.status());
    json out = json::array();
    for (const auto& r : *regions) {
      out.push_back({{"name", r.name}, {"key", r.key}, {"offset", r.offset}, {"byte_size", r.byte_size}});
    }
    return JsonResponse(out);
  }
  if (action == "unregister") {
    if (region.empty()) {
      shm_->UnregisterAll();
      return Empty(200);
    }
    // Unregistering a name that is not registered is not an error (Triton;
    // the gRPC call answers the same).
    Status st = shm_->Unregister(region);
    return st.ok() || st.code() == StatusCode::kNotFound ? Empty(200) : HttpError(st);
  }
  StatusOr<json> body = JsonBody(request);  // register
  if (!body.ok()) return HttpError(body.status());
  const auto key = body->find("key");
  if (key == body->end() || !key->is_string()) {
    return HttpError(Status::InvalidArgument("register: \"key\" (the shared-memory object's name) is required"));
  }
  uint64_t values[2] = {0, 0};
  const char* names[2] = {"offset", "byte_size"};
  for (int i = 0; i < 2; ++i) {
    const auto it = body->find(names[i]);
    if (it == body->end()) {
      if (i == 0) continue;  // offset defaults to 0
      return HttpError(Status::InvalidArgument("register: \"byte_size\" is required"));
    }
    if (!it->is_number_unsigned() && !(it->is_number_integer() && it->get<int64_t>() >= 0)) {
      return HttpError(Status::InvalidArgument(std::string("register: \"") + names[i] + "\" must be an integer >= 0"));
    }
    values[i] = it->get<uint64_t>();
  }
  Status st = shm_->Register(region, key->get<std::string>(), values[0], values[1]);
  return st.ok() ? Empty(200) : HttpError(st);
}

namespace {

// One HTTP inference call: what must live until the answer has been written.
struct InferExchange {
  std::shared_ptr<HttpRequest> http;
  inference::ModelInferRequest request;
  inference::ModelInferResponse response;
  HttpOutputPlan plan;
  InferCalls::Place place;
};

}  // namespace

void HttpRoutes::Infer(std::shared_ptr<HttpRequest> http, const std::string& model, const std::string& version,
                       Reply reply) {
  StatusOr<InferCalls::Place> place = calls_->Admit(model);
  if (!place.ok()) return reply(HttpError(place.status()));
  auto call = std::make_shared<InferExchange>();
  call->http = std::move(http);
  call->place = *place;
  std::optional<uint64_t> header_length;
  if (const std::string& h = call->http->inference_header_length; !h.empty()) {
    if (h.size() > 19 || h.find_first_not_of("0123456789") != std::string::npos) {
      const Status bad = Status::InvalidArgument("Inference-Header-Content-Length '" + h + "' is not a byte count");
      calls_->Refuse(call->place, model, bad);
      return reply(HttpError(bad));
    }
    header_length = std::stoull(h);
  }
  if (Status s = DecodeHttpInferRequest(call->http->body, header_length, model, version, &call->request, &call->plan);
      !s.ok()) {
    calls_->Refuse(call->place, model, s);  // as a gRPC request that fails to decode
    return reply(HttpError(s));
  }
  // The request proto holds its own copy of every tensor's bytes: the body can go.
  call->http->body.clear();
  call->http->body.shrink_to_fit();
  InferCalls::Place run_place = call->place;
  InferCalls::CallContext context;
  context.http = true;
  if (call->http->client_gone) context.cancelled = [gone = call->http->client_gone] { return gone->load(); };
  context.header = [http = call->http](const std::string& name) { return HeaderOf(*http, name); };
  calls_->Run(run_place, call->request, &call->response, std::move(context),
              [call, reply = std::move(reply)](const Status& status) {
                HttpResponse r;
                r.hold = call;  // the place stays held until the answer is written
                r.render = [call, status](HttpResponse& out) {
                  if (!status.ok()) {
                    out = HttpError(status);
                    return;
                  }
                  StatusOr<HttpInferBody> body = EncodeHttpInferResponse(call->response, call->plan);
                  if (!body.ok()) {
                    out = HttpError(body.status());
                    return;
                  }
                  out.body = std::move(body->body);
                  out.inference_header_length = body->header_length;
                  if (out.inference_header_length) out.content_type = "application/octet-stream";
                };
                reply(std::move(r));
              });
}

}  // namespace es
