// Acceptance: clients cannot make the router hold unbounded memory.
//
// A hostile client speaks raw HTTP/2 (hand-written frames, below): it opens
// many ModelInfer calls on several connections, each asking `blowup` for a
// 1 MiB answer, with INITIAL_WINDOW_SIZE 0 so the server can never send a
// byte of those answers, and it never reads its socket again. Every answer
// the router computes therefore stays in the router until the connection
// goes. Bounded by limits.max_inflight_calls, the router holds at most that
// many answers: its RSS stays under a stated bound, further calls are
// refused RESOURCE_EXHAUSTED naming the limit, and once the hostile client
// goes a normal client is answered again.
//
// Only 127.0.0.1 is contacted.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "tests/common/test_paths.h"
#include "tests/integration/kserve_helpers.h"
#include "tests/integration/server_process.h"

namespace es::it {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr int kMaxInflightCalls = 16;
constexpr int kStreamsPerConnection = 64;     // = grpc_max_concurrent_streams below
constexpr int kConnections = 8;               // 512 calls in all, 32 times the limit
constexpr int64_t kAnswerBytes = 262144 * 4;  // blowup's output

// ---- just enough HTTP/2 (RFC 9113) and HPACK (RFC 7541) for gRPC calls ----

void AppendFrame(std::string* out, uint8_t type, uint8_t flags, uint32_t stream, const std::string& payload) {
  const uint32_t n = static_cast<uint32_t>(payload.size());
  const char header[9] = {
      static_cast<char>(n >> 16),      static_cast<char>(n >> 8),      static_cast<char>(n),
      static_cast<char>(type),         static_cast<char>(flags),       static_cast<char>(stream >> 24),
      static_cast<char>(stream >> 16), static_cast<char>(stream >> 8), static_cast<char>(stream)};
  out->append(header, 9);
  out->append(payload);
}

// An HPACK integer with a 7-bit prefix (the string-length form, no Huffman).
void AppendHpackLength(std::string* out, size_t n) {
  if (n < 127) {
    out->push_back(static_cast<char>(n));
    return;
  }
  out->push_back(static_cast<char>(127));
  n -= 127;
  while (n >= 128) {
    out->push_back(static_cast<char>(0x80 | (n & 0x7f)));
    n >>= 7;
  }
  out->push_back(static_cast<char>(n));
}

// "Literal header field without indexing, new name": nothing to remember.
void AppendHeader(std::string* out, const std::string& name, const std::string& value) {
  out->push_back(0);
  AppendHpackLength(out, name.size());
  out->append(name);
  AppendHpackLength(out, value.size());
  out->append(value);
}

std::string SettingsPayload(std::initializer_list<std::pair<uint16_t, uint32_t>> settings) {
  std::string p;
  for (const auto& [id, value] : settings) {
    const char entry[6] = {static_cast<char>(id >> 8),     static_cast<char>(id),
                           static_cast<char>(value >> 24), static_cast<char>(value >> 16),
                           static_cast<char>(value >> 8),  static_cast<char>(value)};
    p.append(entry, 6);
  }
  return p;
}

bool WriteAll(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// One hostile connection: handshakes, sends its calls, then never reads.
class NonReadingConnection {
 public:
  ~NonReadingConnection() {
    if (fd_ >= 0) close(fd_);
  }

  bool Connect(int port, std::string* error) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd_ < 0 || connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      *error = std::string("connect: ") + std::strerror(errno);
      return false;
    }
    const int one = 1;
    setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    std::string hello = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    // ENABLE_PUSH (2) = 0, INITIAL_WINDOW_SIZE (4) = 0: the server may send
    // headers on our streams, never data.
    AppendFrame(&hello, 0x4, 0, 0, SettingsPayload({{2, 0}, {4, 0}}));
    if (!WriteAll(fd_, hello)) {
      *error = "cannot send the preface";
      return false;
    }
    // The one read: the server's SETTINGS, which a peer must acknowledge.
    std::string in;
    const auto deadline = Clock::now() + seconds(5);
    while (Clock::now() < deadline) {
      for (size_t at = 0; at + 9 <= in.size();) {
        const size_t len = (static_cast<uint8_t>(in[at]) << 16) | (static_cast<uint8_t>(in[at + 1]) << 8) |
                           static_cast<uint8_t>(in[at + 2]);
        if (in[at + 3] == 0x4 && (in[at + 4] & 0x1) == 0) {
          std::string ack;
          AppendFrame(&ack, 0x4, 0x1, 0, "");
          if (WriteAll(fd_, ack)) return true;
          *error = "cannot send the SETTINGS ack";
          return false;
        }
        at += 9 + len;
      }
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      char buf[4096];
      const ssize_t n = recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) break;
      in.append(buf, static_cast<size_t>(n));
    }
    *error = "no SETTINGS from the server";
    return false;
  }

  // Opens `streams` ModelInfer calls, each carrying `message`.
  bool SendCalls(const std::string& authority, const std::string& message, int streams) {
    std::string frames;
    std::string grpc_message(5, '\0');  // uncompressed, 4-byte big-endian length
    const uint32_t n = static_cast<uint32_t>(message.size());
    grpc_message[1] = static_cast<char>(n >> 24);
    grpc_message[2] = static_cast<char>(n >> 16);
    grpc_message[3] = static_cast<char>(n >> 8);
    grpc_message[4] = static_cast<char>(n);
    grpc_message += message;
    for (int i = 0; i < streams; ++i) {
      const uint32_t stream = 2 * static_cast<uint32_t>(i) + 1;
      std::string headers;
      AppendHeader(&headers, ":method", "POST");
      AppendHeader(&headers, ":scheme", "http");
      AppendHeader(&headers, ":path", "/inference.GRPCInferenceService/ModelInfer");
      AppendHeader(&headers, ":authority", authority);
      AppendHeader(&headers, "content-type", "application/grpc");
      AppendHeader(&headers, "te", "trailers");
      AppendFrame(&frames, 0x1, 0x4, stream, headers);       // HEADERS, END_HEADERS
      AppendFrame(&frames, 0x0, 0x1, stream, grpc_message);  // DATA, END_STREAM
    }
    return WriteAll(fd_, frames);
  }

 private:
  int fd_ = -1;
};

// ---------------------------------------------------------------------------

class LimitsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    WatchdogScope watchdog(seconds(180), "LimitsTest: writing the models and starting the server");
    repo_ = std::make_unique<TempDir>("es_limits_repo_");
    std::string output;
    const int rc =
        RunCommand({"/usr/bin/python3", std::string(es::test_paths::kIntegrationSourceDir) + "/make_queue_models.py",
                    repo_->path().string()},
                   seconds(180), &output);
    ASSERT_EQ(rc, 0) << "make_queue_models.py: " << output;
    ServerProcess::Options options;
    options.repository = repo_->path().string();
    options.hosts = {{"cpu0", 0, "", 1}};
    options.extra_limits = "max_inflight_calls: " + std::to_string(kMaxInflightCalls) +
                           ", grpc_max_concurrent_streams: " + std::to_string(kStreamsPerConnection);
    server_ = ServerProcess::Start(options);
    ASSERT_TRUE(server_) << ServerProcess::last_start_error();
    stub_ = server_->Stub();
  }

  uint64_t Successes(const std::string& model) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    inference::ModelStatisticsRequest req;
    req.set_name(model);
    inference::ModelStatisticsResponse resp;
    const grpc::Status s = stub_->ModelStatistics(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << Describe(s);
    return s.ok() && resp.model_stats_size() ? resp.model_stats(0).inference_stats().success().count() : 0;
  }

  std::unique_ptr<TempDir> repo_;
  std::unique_ptr<ServerProcess> server_;
  std::unique_ptr<Stub> stub_;
};

TEST_F(LimitsTest, ClientThatNeverReadsCannotGrowTheRoutersMemory) {
  WatchdogScope watchdog(seconds(60), "ClientThatNeverReadsCannotGrowTheRoutersMemory");
  const auto request = RawRequest("blowup", {1}, {1.0f});
  // Warm up: the allocator, gRPC's buffers and the host's first forward.
  for (int i = 0; i < 20; ++i) {
    const InferResult r = Infer(*stub_, request);
    ASSERT_TRUE(r.status.ok()) << Describe(r.status);
    ASSERT_EQ(r.response.raw_output_contents(0).size(), static_cast<size_t>(kAnswerBytes));
  }
  std::this_thread::sleep_for(milliseconds(200));
  const long baseline_kib = RssKiB(server_->pid());
  const uint64_t warm_successes = Successes("blowup");
  ASSERT_GT(baseline_kib, 0);

  // The bound: each held call keeps its answer about three times (the
  // router's copy out of the arena, the response message, gRPC's serialized
  // copy waiting for a window that never opens), plus 64 MiB for the
  // connections' buffers, allocator slack and threads. Without the limit the
  // 512 calls would hold over 1 GiB.
  const long bound_kib = baseline_kib + kMaxInflightCalls * 3 * kAnswerBytes / 1024 + 64 * 1024;

  const int port = std::stoi(server_->address().substr(server_->address().rfind(':') + 1));
  std::vector<std::unique_ptr<NonReadingConnection>> hostile;
  for (int c = 0; c < kConnections; ++c) {
    auto conn = std::make_unique<NonReadingConnection>();
    std::string error;
    ASSERT_TRUE(conn->Connect(port, &error)) << error;
    ASSERT_TRUE(conn->SendCalls(server_->address(), request.SerializeAsString(), kStreamsPerConnection));
    hostile.push_back(std::move(conn));
  }

  // The admitted calls are computed (their answers then wait forever) ...
  const auto deadline = Clock::now() + seconds(15);
  while (Successes("blowup") < warm_successes + kMaxInflightCalls && Clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(50));
  }
  // ... and for two more seconds nothing else is, while RSS is watched.
  long peak_kib = 0;
  for (auto until = Clock::now() + seconds(2); Clock::now() < until;) {
    peak_kib = std::max(peak_kib, RssKiB(server_->pid()));
    std::this_thread::sleep_for(milliseconds(20));
  }
  const uint64_t computed = Successes("blowup") - warm_successes;
  std::printf("router RSS: %ld KiB before, peak %ld KiB with %d hostile calls open (bound %ld KiB); %llu computed\n",
              baseline_kib, peak_kib, kConnections * kStreamsPerConnection, bound_kib,
              static_cast<unsigned long long>(computed));
  EXPECT_EQ(computed, static_cast<uint64_t>(kMaxInflightCalls)) << "calls past max_inflight_calls were admitted";
  EXPECT_LE(peak_kib, bound_kib) << "the router's memory grew past the bound";

  // Meanwhile a normal client is refused at once, told why.
  const InferResult busy = Infer(*stub_, request, seconds(5));
  EXPECT_TRUE(
      HasError(busy.status, grpc::RESOURCE_EXHAUSTED, {"max_inflight_calls " + std::to_string(kMaxInflightCalls)}));
  // At once: not after the hostile calls (which never end by themselves);
  // the bound is loose for a busy machine (tests run side by side).
  EXPECT_LT(busy.latency, milliseconds(4000));

  // The hostile client goes: its calls are cancelled, their places freed,
  // and a normal client is answered again.
  hostile.clear();
  InferResult after;
  for (auto until = Clock::now() + seconds(10); Clock::now() < until;) {
    after = Infer(*stub_, request, seconds(5));
    if (after.status.ok()) break;
    std::this_thread::sleep_for(milliseconds(50));
  }
  EXPECT_TRUE(after.status.ok()) << "after the hostile client left: " << Describe(after.status);
  const long after_kib = RssKiB(server_->pid());
  std::printf("router RSS after the hostile client left: %ld KiB\n", after_kib);
  EXPECT_LE(after_kib, bound_kib);
}

}  // namespace
}  // namespace es::it
