// bench-grpc-floor: the gRPC floor under ensemble-server's figures.
//
//   bench-grpc-floor --config server.yaml [--port 0]
//
// A KServe v2 server on the same gRPC callback API as ensemble-server's
// router (and the same process settings, TuneGrpcProcess) that answers ModelMetadata for the repository's
// models exactly as the router does, and ModelInfer with outputs of the right
// names, types and sizes (zeros; batched models with fixed output dims) without decoding, queueing, hosts or compute:
// the cost that gRPC and protobuf alone put on every request. Driven by the
// same load generator as the server, it gives the throughput ceiling and the
// per-request CPU that no server on this API can go below on this machine
// (benchmarks/run_batching.sh). Prints "grpc listening on ADDR" when ready;
// stops on SIGTERM or SIGINT.
//
// With --answer-from-thread every ModelInfer is finished by one thread of
// its own, which sleeps until a call is handed to it, as the router's
// completion threads finish the calls the hosts answered: the same answers
// with one hand-off between threads, the floor of any server whose answers
// come from a thread that is not gRPC's (benchmarks/run_overhead.sh).
#include <grpcpp/grpcpp.h>
#include <signal.h>

#include <CLI/CLI.hpp>
#include <climits>
#include <cstdio>
#include <deque>
#include <memory>
#include <string>
#include <thread>

#include "common/command_line.h"
#include "common/grpc_process.h"
#include "common/mutex.h"
#include "config/server_config.h"
#include "proto/grpc_service.grpc.pb.h"
#include "server/kserve/request_codec.h"

namespace {

// Finishes the calls handed to it on its own thread, in order; sleeps
// (a condition variable) while there are none.
class Answerer {
 public:
  Answerer() : thread_([this] { Loop(); }) {}
  ~Answerer() {
    {
      es::MutexLock lock(&mu_);
      stop_ = true;
    }
    ready_.NotifyOne();
    thread_.join();
  }
  Answerer(const Answerer&) = delete;
  Answerer& operator=(const Answerer&) = delete;

  void Hand(grpc::ServerUnaryReactor* reactor) {
    {
      es::MutexLock lock(&mu_);
      calls_.push_back(reactor);
    }
    ready_.NotifyOne();
  }

 private:
  void Loop() {
    es::MutexLock lock(&mu_);
    while (true) {
      while (calls_.empty() && !stop_) ready_.Wait(&mu_);
      if (calls_.empty()) return;  // stopping, every call answered
      grpc::ServerUnaryReactor* reactor = calls_.front();
      calls_.pop_front();
      lock.Unlock();
      reactor->Finish(grpc::Status::OK);
      lock.Lock();
    }
  }

  es::Mutex mu_;
  es::CondVar ready_;
  std::deque<grpc::ServerUnaryReactor*> calls_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: starts once the members above exist
};

class FloorService final : public inference::GRPCInferenceService::CallbackService {
 public:
  // `answerer` (may be null): finishes ModelInfer calls on its thread.
  FloorService(const es::ServerConfig* config, Answerer* answerer) : config_(config), answerer_(answerer) {}

  grpc::ServerUnaryReactor* ServerLive(grpc::CallbackServerContext* ctx, const inference::ServerLiveRequest*,
                                       inference::ServerLiveResponse* resp) override {
    resp->set_live(true);
    return Reply(ctx, grpc::Status::OK);
  }

  grpc::ServerUnaryReactor* ModelReady(grpc::CallbackServerContext* ctx, const inference::ModelReadyRequest* req,
                                       inference::ModelReadyResponse* resp) override {
    resp->set_ready(config_->FindModel(req->name()) != nullptr);
    return Reply(ctx, grpc::Status::OK);
  }

  grpc::ServerUnaryReactor* ModelMetadata(grpc::CallbackServerContext* ctx,
                                          const inference::ModelMetadataRequest* req,
                                          inference::ModelMetadataResponse* resp) override {
    const es::ModelConfig* model = config_->FindModel(req->name());
    if (model == nullptr) return Reply(ctx, grpc::Status(grpc::StatusCode::NOT_FOUND, std::string("no model ").append(req->name())));
    resp->set_name(model->name);
    resp->add_versions("1");
    resp->set_platform("pytorch_libtorch");
    for (const auto& in : model->inputs) es::FillTensorMetadata(*model, in, resp->add_inputs());
    for (const auto& out : model->outputs) es::FillTensorMetadata(*model, out, resp->add_outputs());
    return Reply(ctx, grpc::Status::OK);
  }

  grpc::ServerUnaryReactor* ModelInfer(grpc::CallbackServerContext* ctx, const inference::ModelInferRequest* req,
                                       inference::ModelInferResponse* resp) override {
    const es::ModelConfig* model = config_->FindModel(req->model_name());
    if (model == nullptr || !model->batched() || req->inputs_size() == 0 || req->inputs(0).shape_size() == 0) {
      return Reply(ctx, grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "not a request for a batched model"));
    }
    const int64_t rows = req->inputs(0).shape(0);
    resp->set_model_name(model->name);
    resp->set_model_version("1");
    resp->set_id(req->id());
    for (const auto& out : model->outputs) {
      auto* t = resp->add_outputs();
      t->set_name(out.name);
      t->set_datatype(es::DataTypeName(out.datatype));
      t->add_shape(rows);
      int64_t elements = rows;
      for (int64_t d : out.dims) {
        if (d < 0) {  // a status other than OK sends no response message
          return Reply(ctx, grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                         "the floor answers only outputs of fixed dims"));
        }
        t->add_shape(d);
        elements *= d;
      }
      resp->add_raw_output_contents(std::string(static_cast<size_t>(elements * es::DataTypeSize(out.datatype)), '\0'));
    }
    if (answerer_ == nullptr) return Reply(ctx, grpc::Status::OK);
    auto* reactor = ctx->DefaultReactor();
    answerer_->Hand(reactor);
    return reactor;
  }

 private:
  static grpc::ServerUnaryReactor* Reply(grpc::CallbackServerContext* ctx, const grpc::Status& status) {
    auto* reactor = ctx->DefaultReactor();
    reactor->Finish(status);
    return reactor;
  }

  const es::ServerConfig* config_;
  Answerer* const answerer_;
};

}  // namespace

int main(int argc, char** argv) {
  es::TuneGrpcProcess();
  std::string config_path;
  int port = 0;
  CLI::App app{"bench-grpc-floor: a KServe v2 server that only answers (the gRPC floor under ensemble-server)"};
  app.add_option("--config", config_path, "the server config whose repository's models it answers for")->required();
  app.add_option("--port", port, "gRPC port on 127.0.0.1 (0: a free one)");
  bool answer_from_thread = false;
  app.add_flag("--answer-from-thread", answer_from_thread,
               "finish every ModelInfer on a thread of its own (a hand-off, as the router's answers)");
  if (std::optional<int> exit_code = es::ParseCommandLine(app, argc, argv, "bench-grpc-floor")) return *exit_code;

  auto config = es::LoadServerConfig(config_path);
  if (!config.ok()) {
    std::fprintf(stderr, "bench-grpc-floor: %s\n", config.status().ToString().c_str());
    return 2;
  }
  // Signals are taken by sigwait below, so they are blocked before gRPC starts threads.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);

  std::unique_ptr<Answerer> answerer = answer_from_thread ? std::make_unique<Answerer>() : nullptr;
  FloorService service(&config.value(), answerer.get());
  grpc::ServerBuilder builder;
  int bound_port = 0;
  builder.AddListeningPort("127.0.0.1:" + std::to_string(port), grpc::InsecureServerCredentials(), &bound_port);
  builder.SetMaxReceiveMessageSize(INT_MAX);
  builder.SetMaxSendMessageSize(INT_MAX);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || bound_port == 0) {
    std::fprintf(stderr, "bench-grpc-floor: cannot listen on 127.0.0.1:%d\n", port);
    return 1;
  }
  std::printf("grpc listening on 127.0.0.1:%d\n", bound_port);
  std::fflush(stdout);
  int signal_number = 0;
  sigwait(&stop, &signal_number);
  server->Shutdown();
  return 0;
}
