// bench-grpc-floor: the gRPC floor under ensemble-server's figures.
//
//   bench-grpc-floor --config server.yaml [--port 0] [--answer-from-thread] [--async [--async-threads N]]
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
//
// With --async, ModelInfer is served on gRPC's asynchronous completion-queue
// API instead (the other methods stay on the callback API): one thread per
// queue takes the calls and answers them itself or, with
// --answer-from-thread too, hands them to the answering thread, whose
// finished calls complete on a queue of their own that no thread sleeps on
// (the answering thread collects them between calls). It measures what a
// hand-off costs when gRPC has no thread of its own to wake for it.
#include <grpcpp/grpcpp.h>
#include <signal.h>

#include <CLI/CLI.hpp>
#include <climits>
#include <cstdio>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/command_line.h"
#include "common/grpc_process.h"
#include "common/mutex.h"
#include "config/server_config.h"
#include "proto/grpc_service.grpc.pb.h"
#include "server/kserve/request_codec.h"

namespace {

// Finishes the calls handed to it on its own thread, in order; sleeps
// (a condition variable) while there are none. `after_each` (may be empty)
// runs on that thread after every call it finished.
class Answerer {
 public:
  explicit Answerer(std::function<void()> after_each = {})
      : after_each_(std::move(after_each)), thread_([this] { Loop(); }) {}
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

  // `finish` runs once, on the answering thread.
  void Hand(std::function<void()> finish) {
    {
      es::MutexLock lock(&mu_);
      calls_.push_back(std::move(finish));
    }
    ready_.NotifyOne();
  }

 private:
  void Loop() {
    es::MutexLock lock(&mu_);
    while (true) {
      while (calls_.empty() && !stop_) ready_.Wait(&mu_);
      if (calls_.empty()) return;  // stopping, every call answered
      std::function<void()> finish = std::move(calls_.front());
      calls_.pop_front();
      lock.Unlock();
      finish();
      if (after_each_) after_each_();
      lock.Lock();
    }
  }

  es::Mutex mu_;
  es::CondVar ready_;
  std::deque<std::function<void()>> calls_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  const std::function<void()> after_each_;
  std::thread thread_;  // last: starts once the members above exist
};

// The answer the floor gives a ModelInfer: outputs of the right names, types
// and sizes, zeros; or why it cannot answer.
grpc::Status FillAnswer(const es::ServerConfig& config, const inference::ModelInferRequest& req,
                        inference::ModelInferResponse* resp) {
  const es::ModelConfig* model = config.FindModel(req.model_name());
  if (model == nullptr || !model->batched() || req.inputs_size() == 0 || req.inputs(0).shape_size() == 0) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "not a request for a batched model");
  }
  const int64_t rows = req.inputs(0).shape(0);
  resp->set_model_name(model->name);
  resp->set_model_version("1");
  resp->set_id(req.id());
  for (const auto& out : model->outputs) {
    auto* t = resp->add_outputs();
    t->set_name(out.name);
    t->set_datatype(es::DataTypeName(out.datatype));
    t->add_shape(rows);
    int64_t elements = rows;
    for (int64_t d : out.dims) {
      if (d < 0) {  // a status other than OK sends no response message
        return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "the floor answers only outputs of fixed dims");
      }
      t->add_shape(d);
      elements *= d;
    }
    resp->add_raw_output_contents(std::string(static_cast<size_t>(elements * es::DataTypeSize(out.datatype)), '\0'));
  }
  return grpc::Status::OK;
}

// The KServe service's methods other than ModelInfer, on the callback API.
// `Base` is CallbackService or MixedService.
template <class Base>
class FloorService : public Base {
 public:
  explicit FloorService(const es::ServerConfig* config) : config_(config) {}

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

 protected:
  static grpc::ServerUnaryReactor* Reply(grpc::CallbackServerContext* ctx, const grpc::Status& status) {
    auto* reactor = ctx->DefaultReactor();
    reactor->Finish(status);
    return reactor;
  }

  const es::ServerConfig* config_;
};

// The whole service on the callback API.
class CallbackFloor final : public FloorService<inference::GRPCInferenceService::CallbackService> {
 public:
  // `answerer` (may be null): finishes ModelInfer calls on its thread.
  CallbackFloor(const es::ServerConfig* config, Answerer* answerer) : FloorService(config), answerer_(answerer) {}

  grpc::ServerUnaryReactor* ModelInfer(grpc::CallbackServerContext* ctx, const inference::ModelInferRequest* req,
                                       inference::ModelInferResponse* resp) override {
    grpc::Status status = FillAnswer(*config_, *req, resp);
    if (answerer_ == nullptr || !status.ok()) return this->Reply(ctx, status);
    auto* reactor = ctx->DefaultReactor();
    answerer_->Hand([reactor] { reactor->Finish(grpc::Status::OK); });
    return reactor;
  }

 private:
  Answerer* const answerer_;
};

// CallbackService with ModelInfer on the asynchronous API. (Marking it
// asynchronous on top of CallbackService is not enough: gRPC 1.51 would
// still register its callback handler.)
using S = inference::GRPCInferenceService;
using MixedService = S::WithCallbackMethod_ServerLive<S::WithCallbackMethod_ServerReady<
    S::WithCallbackMethod_ModelReady<S::WithCallbackMethod_ServerMetadata<S::WithCallbackMethod_ModelMetadata<
        S::WithAsyncMethod_ModelInfer<S::WithCallbackMethod_ModelStreamInfer<S::WithCallbackMethod_ModelConfig<
            S::WithCallbackMethod_ModelStatistics<S::WithCallbackMethod_RepositoryIndex<
                S::WithCallbackMethod_RepositoryModelLoad<S::WithCallbackMethod_RepositoryModelUnload<
                    S::WithCallbackMethod_SystemSharedMemoryStatus<S::WithCallbackMethod_SystemSharedMemoryRegister<
                        S::WithCallbackMethod_SystemSharedMemoryUnregister<S::WithCallbackMethod_LogSettings<
                            S::WithCallbackMethod_TraceSetting<S::Service>>>>>>>>>>>>>>>>>;

// ModelInfer on the asynchronous API: one thread per completion queue takes
// the calls and answers each itself or hands it to `answerer`. A call's
// finish completes on `done_` when handed over (drained by the answering
// thread, so no thread is woken for it), else on the queue that took it.
class AsyncInfer {
 public:
  AsyncInfer(const es::ServerConfig* config, MixedService* service, grpc::ServerBuilder* builder, int threads,
             bool hand_over)
      : config_(config), service_(service), hand_over_(hand_over) {
    for (int i = 0; i < threads; ++i) queues_.push_back(builder->AddCompletionQueue());
  }
  AsyncInfer(const AsyncInfer&) = delete;
  AsyncInfer& operator=(const AsyncInfer&) = delete;

  // After the server is built: starts the threads.
  void Start(Answerer* answerer) {
    answerer_ = answerer;
    for (auto& queue : queues_) {
      grpc::ServerCompletionQueue* q = queue.get();
      for (int i = 0; i < kWaitingCalls; ++i) Request(q);
      threads_.emplace_back([this, q] { Serve(q); });
    }
  }

  // On the answering thread: frees the calls whose finish completed.
  void CollectFinished() {
    void* tag = nullptr;
    bool ok = false;
    while (done_.AsyncNext(&tag, &ok, gpr_time_0(GPR_CLOCK_MONOTONIC)) == grpc::CompletionQueue::GOT_EVENT) {
      delete static_cast<Call*>(tag);
    }
  }

  // After the server's shutdown: ends the threads and frees every call.
  void Stop() {
    for (auto& queue : queues_) queue->Shutdown();
    for (auto& thread : threads_) thread.join();
    done_.Shutdown();
    void* tag = nullptr;
    bool ok = false;
    while (done_.Next(&tag, &ok)) delete static_cast<Call*>(tag);
  }

 private:
  static constexpr int kWaitingCalls = 32;  // calls requested ahead, per queue

  struct Call {
    grpc::ServerContext ctx;
    inference::ModelInferRequest req;
    inference::ModelInferResponse resp;
    grpc::ServerAsyncResponseWriter<inference::ModelInferResponse> writer{&ctx};
    bool finishing = false;
  };

  void Request(grpc::ServerCompletionQueue* q) {
    auto* call = new Call;
    grpc::CompletionQueue* finish_on = hand_over_ ? &done_ : q;
    service_->RequestModelInfer(&call->ctx, &call->req, &call->writer, finish_on, q, call);
  }

  void Serve(grpc::ServerCompletionQueue* q) {
    void* tag = nullptr;
    bool ok = false;
    while (q->Next(&tag, &ok)) {
      auto* call = static_cast<Call*>(tag);
      if (call->finishing || !ok) {  // finished, or never started (shutting down)
        delete call;
        continue;
      }
      Request(q);
      call->finishing = true;
      grpc::Status status = FillAnswer(*config_, call->req, &call->resp);
      if (hand_over_) {
        answerer_->Hand([call, status] { call->writer.Finish(call->resp, status, call); });
      } else {
        call->writer.Finish(call->resp, status, call);
      }
    }
  }

  const es::ServerConfig* config_;
  MixedService* const service_;
  const bool hand_over_;
  Answerer* answerer_ = nullptr;
  std::vector<std::unique_ptr<grpc::ServerCompletionQueue>> queues_;
  grpc::CompletionQueue done_;
  std::vector<std::thread> threads_;
};

// Builds and runs the floor until SIGTERM or SIGINT (blocked in `stop`).
// `answerer` ends after the server's shutdown, before `async` (whose queues
// its finished calls complete on) stops.
template <class Service>
int Serve(Service* service, grpc::ServerBuilder* builder, int port, const sigset_t& stop, AsyncInfer* async,
          std::unique_ptr<Answerer>* answerer) {
  int bound_port = 0;
  builder->AddListeningPort("127.0.0.1:" + std::to_string(port), grpc::InsecureServerCredentials(), &bound_port);
  builder->SetMaxReceiveMessageSize(INT_MAX);
  builder->SetMaxSendMessageSize(INT_MAX);
  builder->RegisterService(service);
  std::unique_ptr<grpc::Server> server = builder->BuildAndStart();
  if (!server || bound_port == 0) {
    std::fprintf(stderr, "bench-grpc-floor: cannot listen on 127.0.0.1:%d\n", port);
    return 1;
  }
  if (async != nullptr) async->Start(answerer->get());
  std::printf("grpc listening on 127.0.0.1:%d\n", bound_port);
  std::fflush(stdout);
  int signal_number = 0;
  sigwait(&stop, &signal_number);
  server->Shutdown();
  answerer->reset();
  if (async != nullptr) async->Stop();
  return 0;
}

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
  bool async = false;
  app.add_flag("--async", async, "serve ModelInfer on the asynchronous completion-queue API");
  int async_threads = 1;
  app.add_option("--async-threads", async_threads, "with --async: completion queues, a thread each")
      ->check(CLI::Range(1, 64));
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

  grpc::ServerBuilder builder;
  if (!async) {
    std::unique_ptr<Answerer> answerer = answer_from_thread ? std::make_unique<Answerer>() : nullptr;
    CallbackFloor service(&config.value(), answerer.get());
    return Serve(&service, &builder, port, stop, nullptr, &answerer);
  }
  FloorService<MixedService> service(&config.value());
  AsyncInfer infer(&config.value(), &service, &builder, async_threads, answer_from_thread);
  std::unique_ptr<Answerer> answerer =
      answer_from_thread ? std::make_unique<Answerer>([&infer] { infer.CollectFinished(); }) : nullptr;
  return Serve(&service, &builder, port, stop, &infer, &answerer);
}
