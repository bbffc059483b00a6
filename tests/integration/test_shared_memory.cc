// Acceptance: Triton's system shared-memory extension against the real
// server. The test creates real POSIX shared-memory objects
// (clients/shm_region.h: shm_open + mmap on the client side, as tritonclient
// does), registers regions of them over gRPC, and infers with inputs and
// outputs named by region instead of carried in the message:
//  - the answers are byte-for-byte the in-message path's (echo and mlp);
//  - registration, status and unregistration follow Triton's semantics;
//  - an output too small for its region, an unknown region, a shrunk object
//    are clear errors, and the server keeps serving;
//  - unregistering while requests use the region crashes nothing, and later
//    requests naming it get NOT_FOUND.
//
// The repository is the demo plus `echo` (make_test_models.py: FP32 [-1, -1],
// returns x + 1). One server for the suite.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "clients/shm_region.h"
#include "tests/integration/kserve_helpers.h"
#include "tests/integration/server_process.h"
#include "tests/integration/shared_server.h"

namespace es::it {
namespace {

using client::ShmRegion;
using std::chrono::seconds;

std::string Bytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

template <typename Tensor>
void SetShm(Tensor* t, const std::string& region, uint64_t bytes, uint64_t offset = 0) {
  client::SetShmParameters(t, region, bytes, offset);
}

// An echo request for `n` floats with no contents yet.
inference::ModelInferRequest EchoRequest(int64_t n) {
  inference::ModelInferRequest r;
  r.set_model_name("echo");
  auto* in = r.add_inputs();
  in->set_name("input");
  in->set_datatype("FP32");
  in->add_shape(1);
  in->add_shape(n);
  return r;
}

class SharedMemoryTest : public SharedServerSuite<SharedMemoryTest> {
 public:  // PrepareServer: called by SharedServerSuite
  // The echo test model; requests of up to 4 MiB.
  static std::string PrepareServer(const fs::path& dir, ServerProcess::Options* options) {
    const fs::path repo = dir / "repo";
    std::string error;
    if (!MakeTestRepository(repo, {"echo"}, &error)) return error;
    options->repository = repo.string();
    options->max_request_bytes = 4 << 20;
    return "";
  }

 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(SharedServerSuite::SetUp());
    stub_ = server_->Stub();
  }
  void TearDown() override {
    if (stub_) {
      EXPECT_TRUE(client::UnregisterShm(*stub_, "").ok());  // every region, as Triton's empty name
    }
  }

  std::unique_ptr<ShmRegion> MakeRegion(size_t bytes) {
    auto region = ShmRegion::Create(ShmRegion::UniqueKey("es_it_shm"), bytes);
    EXPECT_TRUE(region.ok()) << region.status().ToString();
    return region.ok() ? std::move(region).value() : nullptr;
  }
  grpc::Status Register(const std::string& name, const ShmRegion& region, uint64_t offset, uint64_t bytes) {
    return client::RegisterShm(*stub_, name, region.key(), offset, bytes);
  }
  inference::SystemSharedMemoryStatusResponse ShmStatus(const std::string& name, grpc::Status* status) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    inference::SystemSharedMemoryStatusRequest req;
    req.set_name(name);
    inference::SystemSharedMemoryStatusResponse resp;
    *status = stub_->SystemSharedMemoryStatus(&ctx, req, &resp);
    return resp;
  }

  std::unique_ptr<Stub> stub_;
};

TEST_F(SharedMemoryTest, RegisterStatusUnregister) {
  WatchdogScope watchdog(seconds(60), "RegisterStatusUnregister");
  auto region = MakeRegion(8192);
  ASSERT_NE(region, nullptr);
  ASSERT_TRUE(Register("a", *region, 0, 4096).ok());
  ASSERT_TRUE(Register("b", *region, 4096, 4096).ok());
  EXPECT_TRUE(HasError(Register("a", *region, 0, 16), grpc::ALREADY_EXISTS, {"'a'"}));
  EXPECT_TRUE(HasError(Register("c", *region, 4096, 4097), grpc::INVALID_ARGUMENT, {"'c'", "8192"}));
  EXPECT_TRUE(HasError(client::RegisterShm(*stub_, "d", "/es_it_shm_no_such_object", 0, 16), grpc::NOT_FOUND,
                       {"es_it_shm_no_such_object"}));

  grpc::Status status;
  auto all = ShmStatus("", &status);
  ASSERT_TRUE(status.ok()) << Describe(status);
  ASSERT_EQ(all.regions_size(), 2);
  const auto& b = all.regions().at("b");
  EXPECT_EQ(b.name(), "b");
  EXPECT_EQ(b.key(), region->key());
  EXPECT_EQ(b.offset(), 4096u);
  EXPECT_EQ(b.byte_size(), 4096u);
  auto one = ShmStatus("a", &status);
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(one.regions_size(), 1);
  ShmStatus("nope", &status);
  EXPECT_TRUE(HasError(status, grpc::NOT_FOUND, {"'nope'"}));

  EXPECT_TRUE(client::UnregisterShm(*stub_, "a").ok());
  EXPECT_TRUE(client::UnregisterShm(*stub_, "a").ok());  // Triton: not registered is OK
  EXPECT_EQ(ShmStatus("", &status).regions_size(), 1);
  EXPECT_TRUE(client::UnregisterShm(*stub_, "").ok());  // all
  EXPECT_EQ(ShmStatus("", &status).regions_size(), 0);

  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  inference::ServerMetadataResponse meta;
  ASSERT_TRUE(stub_->ServerMetadata(&ctx, {}, &meta).ok());
  EXPECT_NE(std::find(meta.extensions().begin(), meta.extensions().end(), "system_shared_memory"),
            meta.extensions().end());
}

// The same request three ways: in the message, input from shared memory,
// input and output in shared memory. Same bytes out every time.
TEST_F(SharedMemoryTest, EchoThroughSharedMemoryMatchesTheMessagePath) {
  WatchdogScope watchdog(seconds(60), "EchoThroughSharedMemory");
  constexpr int64_t kN = 65536;  // 256 KiB
  constexpr size_t kBytes = kN * sizeof(float);
  std::vector<float> values(kN);
  for (int64_t i = 0; i < kN; ++i) values[i] = static_cast<float>(i) * 0.25f - 1000.0f;

  auto message = EchoRequest(kN);
  message.add_raw_input_contents(Bytes(values));
  InferResult expected = Infer(*stub_, message);
  ASSERT_TRUE(expected.status.ok()) << Describe(expected.status);
  ASSERT_EQ(expected.response.raw_output_contents_size(), 1);
  const std::string& want = expected.response.raw_output_contents(0);
  ASSERT_EQ(want.size(), kBytes);

  // Inputs at offset 64 of a region that itself starts at 4096 of its object.
  auto region = MakeRegion(4096 + 64 + 2 * kBytes);
  ASSERT_NE(region, nullptr);
  std::memcpy(region->data() + 4096 + 64, values.data(), kBytes);
  ASSERT_TRUE(Register("io", *region, 4096, 64 + 2 * kBytes).ok());

  auto in_shm = EchoRequest(kN);
  SetShm(in_shm.mutable_inputs(0), "io", kBytes, 64);
  InferResult got = Infer(*stub_, in_shm);
  ASSERT_TRUE(got.status.ok()) << Describe(got.status);
  ASSERT_EQ(got.response.raw_output_contents_size(), 1);
  EXPECT_TRUE(got.response.raw_output_contents(0) == want) << "shm input: output bytes differ";

  auto both = EchoRequest(kN);
  SetShm(both.mutable_inputs(0), "io", kBytes, 64);
  auto* out = both.add_outputs();
  out->set_name("output");
  SetShm(out, "io", kBytes, 64 + kBytes);
  InferResult shm = Infer(*stub_, both);
  ASSERT_TRUE(shm.status.ok()) << Describe(shm.status);
  ASSERT_EQ(shm.response.outputs_size(), 1);
  const auto& t = shm.response.outputs(0);
  EXPECT_EQ(t.name(), "output");
  EXPECT_EQ(t.datatype(), "FP32");
  EXPECT_EQ(std::vector<int64_t>(t.shape().begin(), t.shape().end()), (std::vector<int64_t>{1, kN}));
  EXPECT_EQ(t.parameters().at("shared_memory_region").string_param(), "io");
  EXPECT_EQ(t.parameters().at("shared_memory_byte_size").int64_param(), static_cast<int64_t>(kBytes));
  // Triton's layout: an (empty) raw entry per output, nothing in it.
  ASSERT_EQ(shm.response.raw_output_contents_size(), 1);
  EXPECT_TRUE(shm.response.raw_output_contents(0).empty());
  const std::string written(reinterpret_cast<const char*>(region->data()) + 4096 + 64 + kBytes, kBytes);
  EXPECT_TRUE(written == want) << "shm output: bytes in the region differ from the message path's";
}

TEST_F(SharedMemoryTest, MlpThroughSharedMemoryMatchesTheMessagePath) {
  WatchdogScope watchdog(seconds(60), "MlpThroughSharedMemory");
  const std::vector<float> images = RandomImages(4, 7);
  InferResult expected = Infer(*stub_, ImageRequest("mlp", images));
  ASSERT_TRUE(expected.status.ok()) << Describe(expected.status);
  const std::string want = expected.response.raw_output_contents(0);

  const size_t in_bytes = images.size() * sizeof(float);
  auto region = MakeRegion(in_bytes + want.size());
  ASSERT_NE(region, nullptr);
  std::memcpy(region->data(), images.data(), in_bytes);
  ASSERT_TRUE(Register("img", *region, 0, in_bytes).ok());
  ASSERT_TRUE(Register("probs", *region, in_bytes, want.size()).ok());
  auto req = ImageRequest("mlp", images);
  req.clear_raw_input_contents();
  SetShm(req.mutable_inputs(0), "img", in_bytes);
  auto* out = req.add_outputs();
  out->set_name("probabilities");
  SetShm(out, "probs", want.size());
  InferResult got = Infer(*stub_, req);
  ASSERT_TRUE(got.status.ok()) << Describe(got.status);
  EXPECT_TRUE(std::string(reinterpret_cast<const char*>(region->data()) + in_bytes, want.size()) == want);
}

// An ensemble: its combined output into shared memory, a member's output in
// the message; the raw entries stay aligned with the outputs (Triton's layout).
TEST_F(SharedMemoryTest, EnsembleMixesSharedMemoryAndMessageOutputs) {
  WatchdogScope watchdog(seconds(60), "EnsembleMixesOutputs");
  const std::vector<float> images = RandomImages(2, 11);
  auto plain = ImageRequest("demo_ensemble", images);
  SetBoolParameter(&plain, "return_member_outputs", true);
  plain.add_outputs()->set_name("probabilities");
  plain.add_outputs()->set_name("cnn.probabilities");
  InferResult expected = Infer(*stub_, plain);
  ASSERT_TRUE(expected.status.ok()) << Describe(expected.status);
  ASSERT_EQ(expected.response.raw_output_contents_size(), 2);

  const size_t out_bytes = 2 * kClasses * sizeof(float);
  auto region = MakeRegion(4096);
  ASSERT_NE(region, nullptr);
  ASSERT_TRUE(Register("ens_out", *region, 0, 4096).ok());
  auto req = plain;
  SetShm(req.mutable_outputs(0), "ens_out", out_bytes, 128);
  InferResult got = Infer(*stub_, req);
  ASSERT_TRUE(got.status.ok()) << Describe(got.status);
  ASSERT_EQ(got.response.outputs_size(), 2);
  ASSERT_EQ(got.response.raw_output_contents_size(), 2);
  EXPECT_EQ(got.response.outputs(0).name(), "probabilities");
  EXPECT_TRUE(got.response.raw_output_contents(0).empty());
  EXPECT_TRUE(std::string(reinterpret_cast<const char*>(region->data()) + 128, out_bytes) ==
              expected.response.raw_output_contents(0));
  EXPECT_EQ(got.response.outputs(1).name(), "cnn.probabilities");
  EXPECT_TRUE(got.response.raw_output_contents(1) == expected.response.raw_output_contents(1));
}

TEST_F(SharedMemoryTest, ClearErrors) {
  WatchdogScope watchdog(seconds(60), "ClearErrors");
  constexpr int64_t kN = 1024;
  auto region = MakeRegion(2 * kN * sizeof(float));
  ASSERT_NE(region, nullptr);
  ASSERT_TRUE(Register("in", *region, 0, kN * sizeof(float)).ok());
  ASSERT_TRUE(Register("small", *region, kN * sizeof(float), 100).ok());

  // The output does not fit the room given: named, with both sizes.
  auto small = EchoRequest(kN);
  SetShm(small.mutable_inputs(0), "in", kN * sizeof(float));
  auto* out = small.add_outputs();
  out->set_name("output");
  SetShm(out, "small", 100);
  EXPECT_TRUE(HasError(Infer(*stub_, small).status, grpc::INVALID_ARGUMENT, {"'output'", "4096", "100", "'small'"}));

  // An unknown region, for an input and for an output.
  auto unknown = EchoRequest(kN);
  SetShm(unknown.mutable_inputs(0), "nope", kN * sizeof(float));
  EXPECT_TRUE(HasError(Infer(*stub_, unknown).status, grpc::NOT_FOUND, {"'input'", "'nope'"}));
  auto unknown_out = EchoRequest(kN);
  unknown_out.add_raw_input_contents(std::string(kN * sizeof(float), '\0'));
  auto* o = unknown_out.add_outputs();
  o->set_name("output");
  SetShm(o, "nope", 4096);
  EXPECT_TRUE(HasError(Infer(*stub_, unknown_out).status, grpc::NOT_FOUND, {"'output'", "'nope'"}));

  // The byte size disagrees with the shape; a range outside the region.
  auto wrong = EchoRequest(kN);
  SetShm(wrong.mutable_inputs(0), "in", kN * sizeof(float) - 4);
  EXPECT_TRUE(HasError(Infer(*stub_, wrong).status, grpc::INVALID_ARGUMENT, {"'input'", "shared_memory_byte_size"}));
  auto outside = EchoRequest(kN);
  SetShm(outside.mutable_inputs(0), "in", kN * sizeof(float), 4);
  EXPECT_TRUE(HasError(Infer(*stub_, outside).status, grpc::INVALID_ARGUMENT, {"'input'", "'in'"}));

  // Shared memory plus a raw entry for the same (only) input.
  auto mixed = EchoRequest(kN);
  SetShm(mixed.mutable_inputs(0), "in", kN * sizeof(float));
  mixed.add_raw_input_contents(std::string(kN * sizeof(float), '\0'));
  EXPECT_TRUE(HasError(Infer(*stub_, mixed).status, grpc::INVALID_ARGUMENT, {"raw_input_contents"}));

  // The server still answers normally.
  auto fine = EchoRequest(kN);
  SetShm(fine.mutable_inputs(0), "in", kN * sizeof(float));
  EXPECT_TRUE(Infer(*stub_, fine).status.ok());
}

// The client shrinks its object after registration: the router (which never
// maps it) answers an error instead of dying of SIGBUS.
TEST_F(SharedMemoryTest, TruncatedObjectIsAnErrorAndTheServerLives) {
  WatchdogScope watchdog(seconds(60), "TruncatedObject");
  constexpr int64_t kN = 4096;
  auto region = MakeRegion(2 * kN * sizeof(float));
  ASSERT_NE(region, nullptr);
  ASSERT_TRUE(Register("r", *region, 0, 2 * kN * sizeof(float)).ok());
  const int fd = ::shm_open(region->key().c_str(), O_RDWR, 0);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, 100), 0);
  ::close(fd);
  const pid_t router = server_->pid();
  auto in = EchoRequest(kN);
  SetShm(in.mutable_inputs(0), "r", kN * sizeof(float));
  EXPECT_TRUE(HasError(Infer(*stub_, in).status, grpc::INVALID_ARGUMENT, {"'r'", "truncated"}));
  auto out = EchoRequest(kN);
  out.add_raw_input_contents(std::string(kN * sizeof(float), '\0'));
  auto* o = out.add_outputs();
  o->set_name("output");
  SetShm(o, "r", kN * sizeof(float), kN * sizeof(float));
  EXPECT_TRUE(HasError(Infer(*stub_, out).status, grpc::INVALID_ARGUMENT, {"'output'", "truncated"}));
  EXPECT_TRUE(ProcessAlive(router));
  EXPECT_EQ(ServerReady(*stub_), std::optional<bool>(true));
}

// Requests keep using a region while it is unregistered: each is answered
// (OK, or NOT_FOUND once the name is gone), nothing crashes, and requests
// after the unregistration get NOT_FOUND.
TEST_F(SharedMemoryTest, UnregisterWhileRequestsRun) {
  WatchdogScope watchdog(seconds(120), "UnregisterWhileRequestsRun");
  constexpr int64_t kN = 65536;
  constexpr size_t kBytes = kN * sizeof(float);
  constexpr int kThreads = 4;
  auto region = MakeRegion(kThreads * 2 * kBytes);
  ASSERT_NE(region, nullptr);
  std::vector<float> values(kN, 2.0f);
  for (int t = 0; t < kThreads; ++t) std::memcpy(region->data() + t * 2 * kBytes, values.data(), kBytes);
  ASSERT_TRUE(Register("busy", *region, 0, kThreads * 2 * kBytes).ok());

  std::atomic<bool> unregistered{false};
  std::atomic<int> ok{0}, not_found{0}, other{0}, ok_after{0};
  std::vector<std::string> others;
  std::mutex others_mu;
  std::vector<std::thread> clients;
  for (int t = 0; t < kThreads; ++t) {
    clients.emplace_back([&, t] {
      auto stub = server_->Stub();
      for (int i = 0; i < 400; ++i) {
        const bool after = unregistered.load();
        auto req = EchoRequest(kN);
        SetShm(req.mutable_inputs(0), "busy", kBytes, t * 2 * kBytes);
        auto* out = req.add_outputs();
        out->set_name("output");
        SetShm(out, "busy", kBytes, t * 2 * kBytes + kBytes);
        const grpc::Status s = Infer(*stub, req).status;
        if (s.ok()) {
          ok.fetch_add(1);
          if (after) ok_after.fetch_add(1);
        } else if (s.error_code() == grpc::NOT_FOUND) {
          not_found.fetch_add(1);
          if (not_found.load() > 20) return;  // seen enough after the unregistration
        } else {
          other.fetch_add(1);
          std::lock_guard<std::mutex> lock(others_mu);
          others.push_back(Describe(s));
        }
      }
    });
  }
  while (ok.load() < 20 && other.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_TRUE(client::UnregisterShm(*stub_, "busy").ok());
  unregistered.store(true);
  for (auto& c : clients) c.join();
  EXPECT_EQ(other.load(), 0) << (others.empty() ? "" : others.front());
  EXPECT_GE(ok.load(), 20);
  EXPECT_GT(not_found.load(), 0);
  EXPECT_EQ(ok_after.load(), 0) << "a request made after the unregistration succeeded";
  // The completed requests wrote x + 1 into their output places.
  float first = 0;
  std::memcpy(&first, region->data() + kBytes, sizeof(float));
  EXPECT_EQ(first, 3.0f);
  auto later = EchoRequest(kN);
  SetShm(later.mutable_inputs(0), "busy", kBytes);
  EXPECT_TRUE(HasError(Infer(*stub_, later).status, grpc::NOT_FOUND, {"'busy'"}));
  EXPECT_TRUE(ProcessAlive(server_->pid()));
  EXPECT_EQ(ServerReady(*stub_), std::optional<bool>(true));
}

}  // namespace
}  // namespace es::it
