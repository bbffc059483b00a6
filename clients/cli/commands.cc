#include "clients/cli/commands.h"

#include <google/protobuf/util/json_util.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <iomanip>
#include <iostream>
#include <map>
#include <numeric>
#include <random>

#include <nlohmann/json.hpp>

#include "clients/cli/input_source.h"
#include "clients/shm_region.h"
#include "clients/tensor.h"
#include "clients/timestamp.h"
#include "proto/parameter_json.h"

namespace es::cli {
namespace {

using es::client::ShapeText;

es::client::SecurityFlags& ConnectionFlags() {
  static es::client::SecurityFlags flags;  // written once by main, before any command
  return flags;
}

int Failed(const es::client::Status& status, const std::string& context = "") {
  const std::string hint = es::client::ConnectionHint(status, ConnectionFlags());
  std::fprintf(stderr, "ensemble-cli: %s%s%s\n", context.empty() ? "" : (context + ": ").c_str(),
               status.ToString().c_str(), hint.empty() ? "" : (" " + hint).c_str());
  return kExitFailed;
}

int Usage(const std::string& message) {
  std::fprintf(stderr, "ensemble-cli: %s (see --help)\n", message.c_str());
  return kExitUsage;
}

std::string ProtoJson(const google::protobuf::Message& message) {
  std::string text;
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  (void)google::protobuf::util::MessageToJsonString(message, &text, options);
  return text;
}

template <typename Repeated>
std::vector<int64_t> Dims(const Repeated& r) {
  return {r.begin(), r.end()};
}

double PerCount(const inference::StatisticDuration& d) {
  return d.count() == 0 ? -1 : static_cast<double>(d.ns()) / static_cast<double>(d.count()) / 1000.0;
}

std::string Us(double us) {
  if (us < 0) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", us);
  return buf;
}

std::string Number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

// Prints one output: a classifier's top-k per row, a per-row scalar, or the
// first values of each row.
void PrintOutput(const es::client::RawOutput& o, int top_k, std::ostream& out) {
  const std::string bytes(o.bytes);
  const size_t count = bytes.size() / std::max<size_t>(1, es::client::DatatypeSize(o.datatype));
  out << o.name << "  " << o.datatype << " " << ShapeText(o.shape) << "\n";
  const int64_t rows = o.shape.empty() ? 1 : o.shape[0];
  const size_t per_row = rows > 0 ? count / static_cast<size_t>(rows) : 0;
  const bool floating = o.datatype == "FP32" || o.datatype == "FP64";
  const bool classifier = floating && o.shape.size() == 2 && o.shape[1] >= 2;
  for (int64_t r = 0; r < rows && r < 1000; ++r) {
    out << "  row " << r << ":";
    std::vector<double> row(per_row);
    for (size_t k = 0; k < per_row; ++k) row[k] = ElementAsDouble(o.datatype, bytes, static_cast<size_t>(r) * per_row + k);
    if (classifier) {
      std::vector<size_t> order(per_row);
      std::iota(order.begin(), order.end(), 0);
      const size_t k = std::min<size_t>(static_cast<size_t>(std::max(1, top_k)), per_row);
      std::partial_sort(order.begin(), order.begin() + static_cast<long>(k), order.end(),
                        [&](size_t a, size_t b) { return row[a] > row[b]; });
      for (size_t i = 0; i < k; ++i) {
        char buf[64];
        std::snprintf(buf, sizeof buf, "  %zu (%.4f)", order[i], row[order[i]]);
        out << buf;
      }
    } else {
      for (size_t k = 0; k < per_row && k < 10; ++k) out << " " << Number(row[k]);
      if (per_row > 10) out << " ... (" << per_row << " values)";
    }
    out << "\n";
  }
  if (rows > 1000) out << "  ... (" << rows << " rows)\n";
}

// The answer's parameters (an ensemble's degraded, members_used,
// member_versions, stages_used, served_by...) as JSON values, keys sorted.
nlohmann::json ResponseParameters(const inference::ModelInferResponse& response) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [key, value] : response.parameters()) j[key] = es::InferParameterJson(value);
  return j;
}

// One answer as JSON: model, version, id, its parameters and each output's values.
es::client::Result<nlohmann::json> AnswerJson(const inference::ModelInferResponse& response) {
  nlohmann::json j;
  j["model_name"] = response.model_name();
  j["model_version"] = response.model_version();
  j["id"] = response.id();
  j["parameters"] = ResponseParameters(response);
  j["outputs"] = nlohmann::json::array();
  for (const auto& name : es::client::OutputNames(response)) {
    ES_ASSIGN_OR_RETURN(const es::client::RawOutput raw, es::client::GetRawOutput(response, name));
    const std::string bytes(raw.bytes);
    const size_t count = bytes.size() / std::max<size_t>(1, es::client::DatatypeSize(raw.datatype));
    std::vector<double> data(count);
    for (size_t i = 0; i < count; ++i) data[i] = ElementAsDouble(raw.datatype, bytes, i);
    j["outputs"].push_back({{"name", name}, {"datatype", raw.datatype}, {"shape", raw.shape}, {"data", data}});
  }
  return j;
}

// One answer as text: the model, the request's inputs, each output.
es::client::Status PrintAnswer(const inference::ModelInferRequest& request, const inference::ModelInferResponse& response,
                               int top_k, std::ostream& out) {
  out << "model " << response.model_name() << " v" << response.model_version();
  for (const auto& in : request.inputs()) out << "  input " << in.name() << " " << ShapeText(Dims(in.shape()));
  out << "\n";
  // What the server says about how it answered: a degraded quorum answer
  // or one from a cheaper rung must not look like a full one.
  const nlohmann::json parameters = ResponseParameters(response);
  if (!parameters.empty()) {
    out << "parameters:";
    for (const auto& [key, value] : parameters.items()) out << " " << key << "=" << value.dump();
    out << "\n";
  }
  for (const auto& name : es::client::OutputNames(response)) {
    ES_ASSIGN_OR_RETURN(const es::client::RawOutput raw, es::client::GetRawOutput(response, name));
    PrintOutput(raw, top_k, out);
  }
  return es::client::Status();
}

// The server's refusal of member outputs or uncertainty for a cascade
// (each row ran through its own stages: there is no one set of members).
bool IsCascadeRefusal(const es::client::Status& status) {
  return status.code() == grpc::StatusCode::INVALID_ARGUMENT &&
         status.message().find("is a cascade") != std::string::npos;
}

// Turns an ensemble request into a cascade's: no member outputs or
// uncertainty; the outputs asked for (every one of the metadata's when none
// was) and exit_stage, the stage each row left at.
void AskCascadeForExitStage(const inference::ModelMetadataResponse& meta, inference::ModelInferRequest* request) {
  request->mutable_parameters()->erase("return_member_outputs");
  request->mutable_parameters()->erase("return_uncertainty");
  if (request->outputs_size() == 0) {
    for (const auto& output : meta.outputs()) es::client::RequestOutput(request, output.name());
  }
  const bool asked = std::any_of(request->outputs().begin(), request->outputs().end(),
                                 [](const auto& o) { return o.name() == "exit_stage"; });
  if (!asked) es::client::RequestOutput(request, "exit_stage");
}

// --streaming: the request `repeat` times over one ModelStreamInfer stream
// (all written before the answers are read; ids ID-0, ID-1... when
// repeated), each answer printed as it comes (JSON: an array of them, an
// error as {"id", "error"}). Exit 1 if any answer is an error or the
// stream fails.
int InferStreaming(const es::client::Client& client, const InferArgs& args, inference::ModelInferRequest request,
                   bool json, std::ostream& out) {
  grpc::ClientContext ctx;
  client.SetDeadline(&ctx, {});
  auto stream = client.stub().ModelStreamInfer(&ctx);
  const int repeat = std::max(1, args.repeat);
  bool written = true;
  for (int i = 0; i < repeat && written; ++i) {
    if (repeat > 1) request.set_id(args.id + (args.id.empty() ? "" : "-") + std::to_string(i));
    written = stream->Write(request);
  }
  stream->WritesDone();
  int exit_code = kExitOk;
  nlohmann::json answers = nlohmann::json::array();
  inference::ModelStreamInferResponse answer;
  while (stream->Read(&answer)) {
    const inference::ModelInferResponse& response = answer.infer_response();
    if (!answer.error_message().empty()) {
      exit_code = kExitFailed;
      if (json) {
        answers.push_back({{"id", response.id()}, {"error", answer.error_message()}});
      } else {
        if (response.id().empty()) {
          std::fprintf(stderr, "ensemble-cli: %s\n", answer.error_message().c_str());
        } else {
          std::fprintf(stderr, "ensemble-cli: request '%s': %s\n", response.id().c_str(), answer.error_message().c_str());
        }
      }
      continue;
    }
    if (json) {
      es::client::Result<nlohmann::json> j = AnswerJson(response);
      if (!j.ok()) return Failed(j.status());
      answers.push_back(std::move(j).value());
      continue;
    }
    if (repeat > 1 || !response.id().empty()) out << "answer id " << response.id() << ": ";
    if (es::client::Status s = PrintAnswer(request, response, args.top_k, out); !s.ok()) return Failed(s);
  }
  const grpc::Status status = stream->Finish();
  if (json) out << answers.dump(2) << "\n";
  if (!status.ok()) {
    return Failed(es::client::Status::FromGrpc(status), args.model + " (stream)");
  }
  return exit_code;
}

}  // namespace

void SetConnectionFlags(const es::client::SecurityFlags& flags) { ConnectionFlags() = flags; }

int Live(const es::client::Api& client, bool json, std::ostream& out) {
  auto live = client.ServerLive();
  if (!live.ok()) return Failed(live.status());
  if (json) {
    out << nlohmann::json{{"live", *live}}.dump() << "\n";
  } else {
    out << (*live ? "live" : "not live") << "\n";
  }
  return *live ? kExitOk : kExitNo;
}

int Ready(const es::client::Api& client, const std::string& model, bool json, std::ostream& out) {
  auto ready = model.empty() ? client.ServerReady() : client.ModelReady(model);
  if (!ready.ok() && ready.status().code() == grpc::StatusCode::NOT_FOUND && !model.empty()) {
    // A model the server does not serve is not ready: "no" (3), with the reason.
    if (json) {
      out << nlohmann::json{{"ready", false}, {"reason", ready.status().ToString()}}.dump() << "\n";
    } else {
      out << "model " << model << " not ready (" << ready.status().ToString() << ")\n";
    }
    return kExitNo;
  }
  if (!ready.ok()) return Failed(ready.status(), model);
  if (json) {
    nlohmann::json j{{"ready", *ready}};
    if (!model.empty()) j["model"] = model;
    out << j.dump() << "\n";
  } else {
    out << (model.empty() ? "server" : "model " + model) << (*ready ? " ready" : " not ready") << "\n";
  }
  return *ready ? kExitOk : kExitNo;
}

int Index(const es::client::Api& client, bool json, std::ostream& out) {
  auto index = client.RepositoryIndex();
  if (!index.ok()) return Failed(index.status());
  if (json) {
    out << ProtoJson(*index);
    return kExitOk;
  }
  out << std::left << std::setw(24) << "MODEL" << std::setw(9) << "VERSION" << std::setw(13) << "STATE"
      << "REASON\n";
  for (const auto& m : index->models()) {
    out << std::setw(24) << m.name() << std::setw(9) << m.version() << std::setw(13) << m.state() << m.reason() << "\n";
  }
  return kExitOk;
}

int Metadata(const es::client::Api& client, const std::string& model, const std::string& version, bool json,
             std::ostream& out) {
  auto meta = client.ModelMetadata(model, version);
  if (!meta.ok()) return Failed(meta.status(), model);
  if (json) {
    // Protobuf's JSON writes int64 as strings; shapes are numbers to a reader.
    nlohmann::json j = nlohmann::json::parse(ProtoJson(*meta));
    for (const char* section : {"inputs", "outputs"}) {
      if (!j.contains(section)) continue;
      for (auto& tensor : j[section]) {
        if (!tensor.contains("shape")) continue;
        for (auto& d : tensor["shape"]) d = std::stoll(d.is_string() ? d.get<std::string>() : d.dump());
      }
    }
    out << j.dump(2) << "\n";
    return kExitOk;
  }
  std::string versions;
  for (const auto& v : meta->versions()) {
    if (!versions.empty()) versions += ",";
    versions += v;
  }
  out << "model " << meta->name() << "  platform " << meta->platform() << "  versions " << versions << "\n";
  for (const auto* section : {"inputs", "outputs"}) {
    const auto& tensors = std::string(section) == "inputs" ? meta->inputs() : meta->outputs();
    out << section << ":\n";
    for (const auto& t : tensors) {
      out << "  " << std::left << std::setw(28) << t.name() << std::setw(7) << t.datatype() << ShapeText(Dims(t.shape()))
          << "\n";
    }
  }
  return kExitOk;
}

int Stats(const es::client::Api& client, const std::string& model, bool json, std::ostream& out) {
  auto stats = client.ModelStatistics(model);
  if (!stats.ok()) return Failed(stats.status(), model);
  if (json) {
    out << ProtoJson(*stats);
    return kExitOk;
  }
  out << std::left << std::setw(22) << "MODEL" << std::right << std::setw(5) << "VER" << std::setw(10) << "SUCCESS"
      << std::setw(7) << "FAIL" << std::setw(10) << "ROWS" << std::setw(8) << "EXECS" << std::setw(11) << "SUCCESS_US"
      << std::setw(10) << "QUEUE_US" << std::setw(11) << "INFER_US" << "  LAST_INFERENCE\n";
  for (const auto& m : stats->model_stats()) {
    const auto& s = m.inference_stats();
    const std::string last =
        m.last_inference() > 0 ? es::client::UtcTimestamp(static_cast<std::time_t>(m.last_inference() / 1000)) : "-";
    out << std::left << std::setw(22) << m.name() << std::right << std::setw(5) << m.version() << std::setw(10)
        << s.success().count() << std::setw(7) << s.fail().count() << std::setw(10) << m.inference_count()
        << std::setw(8) << m.execution_count() << std::setw(11) << Us(PerCount(s.success())) << std::setw(10)
        << Us(PerCount(s.queue())) << std::setw(11) << Us(PerCount(s.compute_infer())) << "  " << last << "\n";
  }
  return kExitOk;
}

int Infer(const es::client::Api& client, const InferArgs& args, bool json, std::ostream& out) {
  auto meta = client.ModelMetadata(args.model, args.version);
  if (!meta.ok()) return Failed(meta.status(), args.model);

  // Which source feeds which input.
  std::map<std::string, std::string> sources;
  for (const auto& spec : args.inputs) {
    const auto eq = spec.find('=');
    std::string name, source;
    if (eq != std::string::npos && spec.rfind("json:", 0) != 0) {
      name = spec.substr(0, eq);
      source = spec.substr(eq + 1);
    } else if (meta->inputs_size() == 1) {
      name = meta->inputs(0).name();
      source = spec;
    } else {
      return Usage("--input " + spec + ": the model has several inputs, write NAME=SOURCE");
    }
    const bool known = std::any_of(meta->inputs().begin(), meta->inputs().end(),
                                   [&](const auto& t) { return t.name() == name; });
    if (!known) {
      std::string names;
      for (const auto& t : meta->inputs()) {
        if (!names.empty()) names += ", ";
        names += t.name();
      }
      return Usage("--input " + spec + ": model '" + args.model + "' has no input '" + name + "' (inputs: " + names + ")");
    }
    sources[name] = source;
  }

  inference::ModelInferRequest request;
  request.set_model_name(args.model);
  request.set_model_version(args.version);
  request.set_id(args.id);
  std::mt19937 rng(args.seed);
  for (const auto& input : meta->inputs()) {
    const auto it = sources.find(input.name());
    const std::string source = it == sources.end() ? "random" : it->second;
    auto tensor = LoadInput(source, input.datatype(), Dims(input.shape()), args.batch, rng);
    if (!tensor.ok()) {
      // The message alone: it names the source, and the code adds nothing a user acts on.
      std::fprintf(stderr, "ensemble-cli: input '%s': %s\n", input.name().c_str(), tensor.status().message().c_str());
      return kExitFailed;
    }
    es::client::Status s = es::client::AddRawInput(&request, input.name(), tensor->datatype, tensor->shape,
                                                   tensor->bytes.data(), tensor->bytes.size());
    if (!s.ok()) return Failed(s);
  }
  // An ensemble's member outputs and uncertainty, unless --plain.
  const bool ensemble_extras = meta->platform() == "ensemble" && !args.plain;
  if (ensemble_extras) {
    es::client::SetParameter(&request, "return_member_outputs", true);
    es::client::SetParameter(&request, "return_uncertainty", true);
  }
  // Each output once, however often it was asked for.
  std::vector<std::string> asked;
  for (const auto& name : args.outputs) {
    if (std::find(asked.begin(), asked.end(), name) == asked.end()) asked.push_back(name);
  }
  for (const auto& name : asked) es::client::RequestOutput(&request, name);

  // --shm: inputs through a region of a new shared-memory object,
  // registered as "ensemble_cli_<pid>"; `shm` unregisters and unlinks it on return.
  std::unique_ptr<es::client::ShmInputs> shm;
  // --streaming is gRPC's (cli_main refuses it with --http).
  if (args.streaming && client.grpc() == nullptr) return Usage("--streaming needs gRPC: not with --http");
  if (args.shm) {
    std::string region = "ensemble_cli_";
    region += std::to_string(::getpid());
    auto moved = es::client::ShmInputs::Move(client, region, &request);
    if (!moved.ok()) return Failed(moved.status());
    shm = std::move(moved).value();
  }
  if (args.streaming) return InferStreaming(*client.grpc(), args, request, json, out);
  auto response = client.Infer(request);
  if (!response.ok() && ensemble_extras && IsCascadeRefusal(response.status())) {
    // The metadata does not say whether an ensemble is a cascade; the server
    // refuses the extras before any member runs, so asking again costs one
    // round trip.
    AskCascadeForExitStage(*meta, &request);
    response = client.Infer(request);
  }
  if (!response.ok()) return Failed(response.status(), args.model);
  if (json) {
    es::client::Result<nlohmann::json> j = AnswerJson(*response);
    if (!j.ok()) return Failed(j.status());
    out << j->dump(2) << "\n";
    return kExitOk;
  }
  if (es::client::Status s = PrintAnswer(request, *response, args.top_k, out); !s.ok()) return Failed(s);
  return kExitOk;
}

}  // namespace es::cli
