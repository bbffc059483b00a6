// HostConnection against a real second process that speaks the channel
// protocol (a forked echo host, no LibTorch), killed with SIGKILL at random
// points of its transfers: the router side must never hang or crash, every
// call must end exactly once with a clear status, the arena must be empty
// afterwards, and no descriptor or shared-memory object may leak.
#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "server/hosts/host_connection.h"
#include "server/hosts/submission_burst.h"

namespace es {
namespace {

using std::chrono::milliseconds;

std::shared_ptr<const OutputSpec> OneFp32Output() {
  return std::make_shared<const OutputSpec>(OutputSpec{{DataType::kFp32}, {}});
}

// The channels are anonymous memfds (no /dev/shm name, which other tests and
// servers on the machine share); a leaked one shows as an open descriptor or a
// mapping of this process, and only those are looked at.
size_t CountChannelMappings() {
  std::ifstream maps("/proc/self/maps");
  size_t n = 0;
  for (std::string line; std::getline(maps, line);) {
    if (line.find("memfd:ensemble-channel") != std::string::npos) ++n;
  }
  return n;
}

size_t CountEntries(const char* dir) {
  size_t n = 0;
  if (DIR* d = opendir(dir)) {
    while (readdir(d) != nullptr) ++n;
    closedir(d);
  }
  return n;
}

// The child: echoes each request's first input into its output region, with
// a little random work so that kills land mid-request, not only between.
[[noreturn]] void EchoHost(int fd, unsigned seed) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the test
  auto attached = ipc::Channel::Attach(fd);
  if (!attached.ok()) _exit(10);
  ipc::Channel channel = std::move(attached).value();
  ipc::HostEnd end(&channel);
  std::atomic<bool> stop{false};
  std::mt19937 rng(seed);
  ipc::RequestDesc req;
  ipc::CompletionDesc comp{};
  channel.header().host_state.store(static_cast<uint32_t>(ipc::HostState::kReady));
  while (true) {
    if (!end.NextRequest(&req)) continue;
    const ipc::TensorDesc& in = req.inputs[0];
    std::memcpy(channel.arena() + req.output_offset, channel.arena() + in.offset, in.bytes);
    if (rng() % 4 == 0) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 300));
    comp.request_id = req.request_id;
    comp.status_code = 0;
    comp.num_outputs = 1;
    comp.outputs[0] = in;
    comp.outputs[0].offset = req.output_offset;
    end.Complete(comp, stop);
  }
}

struct CallLog {
  std::atomic<int> ok{0}, unavailable{0}, other{0}, corrupt{0};
};

// Submits one request whose payload is `value` repeated; checks the echo.
Status SubmitOne(HostConnection& conn, uint32_t value, size_t floats, CallLog* log, std::atomic<int>* done) {
  std::vector<float> payload(floats, static_cast<float>(value));
  TensorParts input;
  input.datatype = DataType::kFp32;
  input.shape = {static_cast<int64_t>(floats)};
  input.pieces = {{reinterpret_cast<const uint8_t*>(payload.data()), floats * sizeof(float), {}}};
  return conn.Submit("echo", 1, {input}, OutputPlan{input.bytes(), OneFp32Output(), {}},
                     [=](const Status& s, const ipc::CompletionDesc* c, const uint8_t* arena) {
                       if (s.ok()) {
                         const auto* out = reinterpret_cast<const float*>(arena + c->outputs[0].offset);
                         bool good = c->outputs[0].bytes == floats * sizeof(float);
                         for (size_t i = 0; good && i < floats; ++i) good = out[i] == static_cast<float>(value);
                         (good ? log->ok : log->corrupt)++;
                       } else if (s.code() == StatusCode::kUnavailable && !s.message().empty()) {
                         log->unavailable++;
                       } else {
                         log->other++;
                       }
                       done->fetch_add(1);
                     });
}

TEST(HostConnectionKillTest, SigkillAtRandomPointsLosesNothing) {
  constexpr int kRounds = 200;
  const size_t fds_before = CountEntries("/proc/self/fd");
  const size_t mappings_before = CountChannelMappings();
  std::mt19937 rng(1234);
  const auto started = std::chrono::steady_clock::now();
  CallLog log;
  int submitted_total = 0;
  for (int round = 0; round < kRounds; ++round) {
    auto created = HostConnection::Create("echo-host", 1 << 20);
    ASSERT_TRUE(created.ok()) << created.status().ToString();
    std::unique_ptr<HostConnection> conn = std::move(created).value();
    const int fd = conn->channel().fd();
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) EchoHost(dup(fd), static_cast<unsigned>(round));
    conn->StartCompletionThread();

    std::atomic<int> done{0};
    std::atomic<int> submitted{0};
    std::atomic<bool> stop_submitting{false};
    std::vector<std::thread> clients;
    for (int t = 0; t < 2; ++t) {
      clients.emplace_back([&, t] {
        std::mt19937 local(static_cast<unsigned>(round * 7 + t));
        for (uint32_t i = 0; !stop_submitting.load() && i < 400; ++i) {
          Status s = SubmitOne(*conn, i + 1000 * static_cast<uint32_t>(t), 1 + local() % 4096, &log, &done);
          if (s.ok()) submitted++;
        }
      });
    }
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 3000));
    kill(child, SIGKILL);
    waitpid(child, nullptr, 0);
    stop_submitting.store(true);
    for (auto& c : clients) c.join();
    // What the supervisor does when it sees the death.
    conn->Close(Status::Unavailable("host 'echo-host' died"));
    EXPECT_EQ(done.load(), submitted.load()) << "round " << round << ": a call was lost or answered twice";
    EXPECT_EQ(conn->outstanding(), 0);
    EXPECT_EQ(conn->arena_used_bytes(), 0u) << "round " << round;
    submitted_total += submitted.load();
    ASSERT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(120)) << "too slow: hang?";
  }
  EXPECT_EQ(log.corrupt.load(), 0);
  EXPECT_EQ(log.other.load(), 0);
  EXPECT_GT(log.ok.load(), 0);
  EXPECT_GT(log.unavailable.load(), 0);
  EXPECT_EQ(log.ok + log.unavailable, submitted_total);
  EXPECT_EQ(CountEntries("/proc/self/fd"), fds_before);
  EXPECT_EQ(CountChannelMappings(), mappings_before);
  std::printf("%d rounds: %d calls answered OK, %d UNAVAILABLE\n", kRounds, log.ok.load(), log.unavailable.load());
}

TEST(HostConnectionTest, FullArenaRefusesOnlyTheRequestThatDoesNotFit) {
  auto created = HostConnection::Create("echo-host", 64 << 10);
  ASSERT_TRUE(created.ok());
  std::unique_ptr<HostConnection> conn = std::move(created).value();
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) EchoHost(dup(conn->channel().fd()), 1);
  conn->StartCompletionThread();
  CallLog log;
  std::atomic<int> done{0};
  // 40 KiB in + 40 KiB out cannot fit in a 64 KiB arena.
  Status big = SubmitOne(*conn, 1, 10 << 10, &log, &done);
  EXPECT_EQ(big.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(big.message().find("arena"), std::string::npos) << big.message();
  // Small requests still go through, one after another.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(SubmitOne(*conn, 7, 256, &log, &done).ok()) << "request " << i;
    while (done.load() <= i && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  }
  EXPECT_EQ(log.ok.load(), 100);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  conn->Close(Status::Unavailable("test over"));
  EXPECT_EQ(conn->arena_used_bytes(), 0u);
}

// How a scripted host answers one request: it may lie, repeat or never answer.
using Answer = std::function<void(ipc::Channel&, const ipc::RequestDesc&, ipc::CompletionDesc*, ipc::HostEnd&,
                                  std::atomic<bool>&)>;

// A host that answers each request through `answer`, given an honest echo
// completion to start from.
[[noreturn]] void ScriptedHost(int fd, const Answer& answer) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  auto attached = ipc::Channel::Attach(fd);
  if (!attached.ok()) _exit(10);
  ipc::Channel channel = std::move(attached).value();
  ipc::HostEnd end(&channel);
  std::atomic<bool> stop{false};
  ipc::RequestDesc req;
  while (true) {
    if (!end.NextRequest(&req)) continue;
    ipc::CompletionDesc comp{};
    comp.request_id = req.request_id;
    comp.num_outputs = 1;
    comp.outputs[0] = req.inputs[0];
    comp.outputs[0].offset = req.output_offset;
    std::memcpy(channel.arena() + req.output_offset, channel.arena() + req.inputs[0].offset, req.inputs[0].bytes);
    answer(channel, req, &comp, end, stop);
  }
}

struct Answered {
  std::atomic<int> calls{0};
  Status status;  // the last one
  std::mutex mu;
};

Status SubmitFloats(HostConnection& conn, size_t floats, Answered* answered) {
  std::vector<float> payload(floats, 1.5f);
  TensorParts input;
  input.datatype = DataType::kFp32;
  input.shape = {static_cast<int64_t>(floats)};
  input.pieces = {{reinterpret_cast<const uint8_t*>(payload.data()), floats * sizeof(float), {}}};
  return conn.Submit("echo", 1, {input}, OutputPlan{input.bytes(), OneFp32Output(), milliseconds(200)},
                     [answered](const Status& s, const ipc::CompletionDesc*, const uint8_t*) {
                       std::lock_guard<std::mutex> lock(answered->mu);
                       answered->status = s;
                       answered->calls++;
                     });
}

// A HostConnection whose host is a forked child answering through `answer`.
class ScriptedConnection {
 public:
  ScriptedConnection(const std::string& host, const Answer& answer) {
    auto created = HostConnection::Create(host, 1 << 20);
    if (!created.ok()) std::abort();
    conn_ = std::move(created).value();
    child_ = fork();
    if (child_ < 0) std::abort();
    if (child_ == 0) ScriptedHost(dup(conn_->channel().fd()), answer);
    conn_->StartCompletionThread();
  }
  ~ScriptedConnection() {
    KillHost();
    conn_->Close(Status::Unavailable("test over"));
  }
  // What the supervisor does first when it gives up on a host.
  void KillHost() {
    if (child_ <= 0) return;
    kill(child_, SIGKILL);
    waitpid(child_, nullptr, 0);
    child_ = -1;
  }
  HostConnection& operator*() { return *conn_; }
  HostConnection* operator->() { return conn_.get(); }

 private:
  std::unique_ptr<HostConnection> conn_;
  pid_t child_ = -1;
};

bool WaitFor(const std::function<bool()>& done, milliseconds timeout = milliseconds(10000)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(milliseconds(1));
  }
  return true;
}

// A member call marked with SubmissionBurst::MarkNext carries the burst's
// number to the host, and kMoreFollow unless it is the last; the mark is for
// one submission only, an inner burst has a number of its own and leaves no
// mark armed when it ends. Every call is answered (the host holds the
// wake-up of the marked ones).
TEST(HostConnectionTest, ABurstMarksOneSubmissionPerMark) {
  std::mutex mu;
  std::vector<std::pair<uint32_t, uint32_t>> seen(6, {99, 99});  // (flags, burst) per call
  std::atomic<int> answered{0};
  ScriptedConnection conn("burst", [](ipc::Channel& channel, const ipc::RequestDesc& req, ipc::CompletionDesc* c,
                                      ipc::HostEnd& end, std::atomic<bool>& stop) {
    // The answer carries the request's flags and burst in its first bytes.
    uint8_t* out = channel.arena() + req.output_offset;
    std::memcpy(out, &req.flags, sizeof(uint32_t));
    std::memcpy(out + sizeof(uint32_t), &req.burst, sizeof(uint32_t));
    end.Complete(*c, stop, &req);
  });
  std::vector<float> payload(4, 0.0f);
  TensorParts input;
  input.datatype = DataType::kFp32;
  input.shape = {4};
  input.pieces = {{reinterpret_cast<const uint8_t*>(payload.data()), sizeof(float) * 4, {}}};
  auto submit = [&](size_t i) {
    return conn->Submit("echo", 1, {input}, OutputPlan{input.bytes(), OneFp32Output(), {}},
                        [&, i](const Status& s, const ipc::CompletionDesc* c, const uint8_t* arena) {
                          if (s.ok()) {
                            const uint8_t* out = arena + c->outputs[0].offset;
                            std::lock_guard<std::mutex> lock(mu);
                            std::memcpy(&seen[i].first, out, sizeof(uint32_t));
                            std::memcpy(&seen[i].second, out + sizeof(uint32_t), sizeof(uint32_t));
                          }
                          answered++;
                        });
  };
  uint32_t outer = 0, inner = 0;
  {
    SubmissionBurst burst;
    burst.MarkNext(/*last=*/false);
    ASSERT_TRUE(submit(0).ok());
    ASSERT_TRUE(submit(1).ok());  // the mark was taken: not marked
    burst.MarkNext(/*last=*/false);
    {
      SubmissionBurst nested;  // a member that is an ensemble itself
      nested.MarkNext(/*last=*/true);
      ASSERT_TRUE(submit(2).ok());
    }
    ASSERT_TRUE(submit(3).ok());  // the outer mark was the nested burst's: not marked
    burst.MarkNext(/*last=*/true);
    ASSERT_TRUE(submit(4).ok());
  }
  ASSERT_TRUE(submit(5).ok());
  ASSERT_TRUE(WaitFor([&] { return answered.load() == 6; }));
  std::lock_guard<std::mutex> lock(mu);
  outer = seen[0].second;
  inner = seen[2].second;
  EXPECT_NE(outer, 0u);
  EXPECT_NE(inner, 0u);
  EXPECT_NE(inner, outer);
  using Seen = std::pair<uint32_t, uint32_t>;
  EXPECT_EQ(seen[0], Seen(ipc::kMoreFollow, outer));
  EXPECT_EQ(seen[1], Seen(0u, 0u));
  EXPECT_EQ(seen[2], Seen(0u, inner));
  EXPECT_EQ(seen[3], Seen(0u, 0u));
  EXPECT_EQ(seen[4], Seen(0u, outer));
  EXPECT_EQ(seen[5], Seen(0u, 0u));
}

// A submission refused before it reaches the host (here: an arena too small)
// still takes its mark: what the thread submits next is not marked.
TEST(HostConnectionTest, ARefusedSubmissionTakesItsMark) {
  std::atomic<uint32_t> flags_seen{99};
  ScriptedConnection conn("refuser", [](ipc::Channel& channel, const ipc::RequestDesc& req, ipc::CompletionDesc* c,
                                        ipc::HostEnd& end, std::atomic<bool>& stop) {
    std::memcpy(channel.arena() + req.output_offset, &req.flags, sizeof(uint32_t));
    end.Complete(*c, stop, &req);
  });
  std::vector<float> big((2 << 20) / sizeof(float), 0.0f);  // more than the 1 MiB arena
  TensorParts too_big;
  too_big.datatype = DataType::kFp32;
  too_big.shape = {static_cast<int64_t>(big.size())};
  too_big.pieces = {{reinterpret_cast<const uint8_t*>(big.data()), big.size() * sizeof(float), {}}};
  SubmissionBurst burst;
  burst.MarkNext(/*last=*/false);
  EXPECT_EQ(conn->Submit("echo", 1, {too_big}, OutputPlan{too_big.bytes(), OneFp32Output(), {}},
                         [](const Status&, const ipc::CompletionDesc*, const uint8_t*) {})
                .code(),
            StatusCode::kResourceExhausted);
  TensorParts small = too_big;
  small.shape = {4};
  small.pieces = {{reinterpret_cast<const uint8_t*>(big.data()), 4 * sizeof(float), {}}};
  ASSERT_TRUE(conn->Submit("echo", 1, {small}, OutputPlan{small.bytes(), OneFp32Output(), {}},
                           [&](const Status& s, const ipc::CompletionDesc* c, const uint8_t* arena) {
                             uint32_t flags = 98;
                             if (s.ok()) std::memcpy(&flags, arena + c->outputs[0].offset, sizeof(uint32_t));
                             flags_seen = flags;
                           })
                  .ok());
  ASSERT_TRUE(WaitFor([&] { return flags_seen.load() != 99; }));
  EXPECT_EQ(flags_seen.load(), 0u);
}

// A completion whose output points at another request's bytes is answered
// INTERNAL (never with those bytes) and recorded as the connection's fault.
TEST(HostConnectionTest, InvalidCompletionIsAnsweredInternalAndFaultsTheHost) {
  Answered answered;  // before conn: its destructor answers what is left
  ScriptedConnection conn("liar", [](ipc::Channel&, const ipc::RequestDesc&, ipc::CompletionDesc* c, ipc::HostEnd& end,
                                     std::atomic<bool>& stop) {
    c->outputs[0].offset = 0;  // the arena's first region: the request's input, not its output
    end.Complete(*c, stop);
  });
  // The first request occupies offset 0; the second's completion points there.
  ASSERT_TRUE(SubmitFloats(*conn, 16, &answered).ok());
  ASSERT_TRUE(WaitFor([&] { return answered.calls.load() == 1; }));
  EXPECT_EQ(conn->violations(), 1u);
  EXPECT_NE(conn->fault().find("outside the request's output region"), std::string::npos) << conn->fault();
  {
    std::lock_guard<std::mutex> lock(answered.mu);
    EXPECT_EQ(answered.status.code(), StatusCode::kInternal) << answered.status.ToString();
    EXPECT_NE(answered.status.message().find("host 'liar'"), std::string::npos);
    EXPECT_NE(answered.status.message().find("model 'echo'"), std::string::npos);
  }
  // Freed just after the answer (the completion thread frees a request's
  // regions once its callback returned): waited for, not raced (under TSan
  // the check came between the two).
  EXPECT_TRUE(WaitFor([&] { return conn->arena_used_bytes() == 0; })) << conn->arena_used_bytes() << " bytes held";
}

// A completion for a request that is not in flight (made up, or a replay)
// answers nothing and is a fault; the real answer still gets through.
TEST(HostConnectionTest, CompletionForNoRequestInFlightIsAFault) {
  Answered answered;  // before conn: its destructor answers what is left
  ScriptedConnection conn("liar", [](ipc::Channel&, const ipc::RequestDesc&, ipc::CompletionDesc* c, ipc::HostEnd& end,
                                     std::atomic<bool>& stop) {
    end.Complete(*c, stop);
    end.Complete(*c, stop);  // the same answer again: a replay
  });
  ASSERT_TRUE(SubmitFloats(*conn, 4, &answered).ok());
  ASSERT_TRUE(WaitFor([&] { return conn->violations() == 1; }));
  EXPECT_EQ(answered.calls.load(), 1);
  {
    std::lock_guard<std::mutex> lock(answered.mu);
    EXPECT_TRUE(answered.status.ok()) << answered.status.ToString();
  }
  EXPECT_NE(conn->fault().find("not in flight"), std::string::npos) << conn->fault();
}

// A host that marks a request as computing and never answers: FindOverrun
// names it once its limit (200 ms) has passed, and Close() gives it its own
// status while the others get the common one.
TEST(HostConnectionTest, FindOverrunNamesARequestPastItsLimit) {
  Answered stuck, queued;  // before conn: its destructor answers what is left
  ScriptedConnection conn("stuck", [](ipc::Channel& channel, const ipc::RequestDesc& req, ipc::CompletionDesc*,
                                      ipc::HostEnd&, std::atomic<bool>&) {
    ipc::ExecutorSlot& slot = channel.header().executors[0];
    slot.started_ns.store(static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
            .count()));
    slot.request_id.store(req.request_id);
    pause();  // the forward that never returns
  });
  // Before the submission: the host stamps its start as soon as it has the
  // request, which can be before this thread runs again on a busy machine.
  const auto submitted = std::chrono::steady_clock::now();
  ASSERT_TRUE(SubmitFloats(*conn, 4, &stuck).ok());
  ASSERT_TRUE(SubmitFloats(*conn, 4, &queued).ok());
  std::optional<Overrun> overrun;
  ASSERT_TRUE(WaitFor([&] { return (overrun = conn->FindOverrun()).has_value(); }));
  EXPECT_GE(std::chrono::steady_clock::now() - submitted, milliseconds(200));
  EXPECT_EQ(overrun->model, "echo");
  EXPECT_EQ(overrun->limit, milliseconds(200));
  EXPECT_GT(overrun->elapsed, milliseconds(200));
  conn.KillHost();
  conn->Close(Status::Unavailable("host went down"),
              {{overrun->request_id, Status::DeadlineExceeded("ran past its limit")}});
  std::lock_guard<std::mutex> a(stuck.mu), b(queued.mu);
  EXPECT_EQ(stuck.status.code(), StatusCode::kDeadlineExceeded) << stuck.status.ToString();
  EXPECT_EQ(queued.status.code(), StatusCode::kUnavailable) << queued.status.ToString();
}

// Time a request spends queued in the host's ring is not compute time: a
// host with one executor that takes 150 ms per request (limit 200 ms) is
// never called hung, although its third request is answered ~450 ms after
// it was submitted.
TEST(HostConnectionTest, QueueTimeInTheHostIsNotCountedAgainstTheLimit) {
  Answered answered;  // before conn: its destructor answers what is left
  ScriptedConnection conn("sequential", [](ipc::Channel& channel, const ipc::RequestDesc& req, ipc::CompletionDesc* c,
                                           ipc::HostEnd& end, std::atomic<bool>& stop) {
    ipc::ExecutorSlot& slot = channel.header().executors[0];
    slot.started_ns.store(static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
            .count()));
    slot.request_id.store(req.request_id);
    std::this_thread::sleep_for(milliseconds(150));
    slot.request_id.store(0);
    end.Complete(*c, stop);
  });
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(SubmitFloats(*conn, 4, &answered).ok());
  bool flagged = false;
  ASSERT_TRUE(WaitFor([&] {
    flagged = flagged || conn->FindOverrun().has_value() || !conn->FindLost().empty();
    return answered.calls.load() == 3;
  }));
  EXPECT_FALSE(flagged) << "an honest host computing within its limit was called hung";
  EXPECT_EQ(conn->violations(), 0u);
}

// A host that takes requests and drops them without a word (no executor
// slot, no completion, heartbeat fine) is caught by FindLost once every
// request before and including the lost one could have run out its limit.
TEST(HostConnectionTest, SilentlyDroppedRequestsAreFoundLost) {
  Answered answered;  // before conn: its destructor answers what is left
  ScriptedConnection conn("dropper", [](ipc::Channel&, const ipc::RequestDesc&, ipc::CompletionDesc*, ipc::HostEnd&,
                                        std::atomic<bool>&) {});
  const auto submitted = std::chrono::steady_clock::now();
  ASSERT_TRUE(SubmitFloats(*conn, 4, &answered).ok());
  ASSERT_TRUE(SubmitFloats(*conn, 4, &answered).ok());
  EXPECT_FALSE(conn->FindOverrun().has_value());
  std::string lost;
  ASSERT_TRUE(WaitFor([&] { return !(lost = conn->FindLost()).empty(); }));
  // The first is lost after its own limit (200 ms) plus the 1 s slack.
  EXPECT_GE(std::chrono::steady_clock::now() - submitted, milliseconds(1200));
  EXPECT_NE(lost.find("model 'echo'"), std::string::npos) << lost;
  EXPECT_NE(lost.find("lost"), std::string::npos) << lost;
  EXPECT_EQ(answered.calls.load(), 0);
}

// A host that waits for a byte on `gate` before it reads a request, then
// answers each request through `answer`: the router can fill the ring (and
// more) before the host takes anything off it.
[[noreturn]] void GatedHost(int fd, const int gate[2], const Answer& answer) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the test, not even while gated
  close(gate[1]);                    // the test's end: its death ends the read
  char byte = 0;
  while (read(gate[0], &byte, 1) < 0 && errno == EINTR) {
  }
  ScriptedHost(fd, answer);
}

// A connection whose host starts reading only on Open().
class GatedConnection {
 public:
  GatedConnection(const std::string& host, const Answer& answer) {
    auto created = HostConnection::Create(host, 8 << 20);
    if (!created.ok() || pipe(gate_) != 0) std::abort();
    conn_ = std::move(created).value();
    child_ = fork();
    if (child_ < 0) std::abort();
    if (child_ == 0) GatedHost(dup(conn_->channel().fd()), gate_, answer);
    conn_->StartCompletionThread();
  }
  ~GatedConnection() {
    KillHost();
    conn_->Close(Status::Unavailable("test over"));
    close(gate_[0]);
    close(gate_[1]);
  }
  void Open() { ASSERT_EQ(write(gate_[1], "x", 1), 1); }
  // What the supervisor does first when it gives up on a host.
  void KillHost() {
    if (child_ <= 0) return;
    kill(child_, SIGKILL);
    waitpid(child_, nullptr, 0);
    child_ = -1;
  }
  HostConnection* operator->() { return conn_.get(); }
  HostConnection& operator*() { return *conn_; }

 private:
  std::unique_ptr<HostConnection> conn_;
  int gate_[2] = {-1, -1};
  pid_t child_ = -1;
};

constexpr int kRingSlots = 256;  // ipc::ChannelOptions' request_slots

// More requests than the request ring holds, sent before the host reads any:
// none is refused (they wait in the router), and all are answered, with the
// right bytes and in the order they came, once the host reads.
TEST(HostConnectionTest, MoreRequestsThanTheRingHoldsWaitAndAreAllAnswered) {
  constexpr int kRequests = 2 * kRingSlots + 44;
  std::mutex mu;
  std::vector<uint32_t> order;
  CallLog log;
  std::atomic<int> done{0};
  GatedConnection conn("gated", [](ipc::Channel&, const ipc::RequestDesc&, ipc::CompletionDesc* c, ipc::HostEnd& end,
                                   std::atomic<bool>& stop) { end.Complete(*c, stop); });
  for (uint32_t i = 0; i < kRequests; ++i) {
    std::vector<float> payload(16, static_cast<float>(i));
    TensorParts input;
    input.datatype = DataType::kFp32;
    input.shape = {16};
    input.pieces = {{reinterpret_cast<const uint8_t*>(payload.data()), input.shape[0] * sizeof(float), {}}};
    const Status s = conn->Submit(
        "echo", 1, {input}, OutputPlan{input.bytes(), OneFp32Output(), {}},
        [&, i](const Status& status, const ipc::CompletionDesc* c, const uint8_t* arena) {
          const bool good =
              status.ok() && reinterpret_cast<const float*>(arena + c->outputs[0].offset)[15] == static_cast<float>(i);
          (good ? log.ok : log.other)++;
          std::lock_guard<std::mutex> lock(mu);
          order.push_back(i);
          done.fetch_add(1);
        });
    ASSERT_TRUE(s.ok()) << "request " << i << ": " << s.ToString();
  }
  EXPECT_EQ(done.load(), 0) << "the host has not read yet";
  conn.Open();
  ASSERT_TRUE(WaitFor([&] { return done.load() == kRequests; }));
  EXPECT_EQ(log.ok.load(), kRequests);
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_TRUE(std::is_sorted(order.begin(), order.end())) << "answered out of the order they came";
  EXPECT_EQ(conn->violations(), 0u);
  EXPECT_TRUE(WaitFor([&] { return conn->arena_used_bytes() == 0; }));
}

// A host answering a request it was never sent (ids are guessable; this
// one still waits for room on the ring) is a protocol violation; nothing is
// answered for it.
TEST(HostConnectionTest, CompletionForARequestNeverSentIsAFault) {
  constexpr int kRequests = kRingSlots + 10;
  Answered answered;  // before conn: its destructor answers what is left
  GatedConnection conn("guesser", [](ipc::Channel&, const ipc::RequestDesc& req, ipc::CompletionDesc* c,
                                     ipc::HostEnd& end, std::atomic<bool>& stop) {
    ipc::CompletionDesc guessed = *c;
    guessed.request_id = req.request_id + kRequests - 1;  // the last one sent: still waiting
    end.Complete(guessed, stop);
    while (true) pause();  // answers nothing more
  });
  for (int i = 0; i < kRequests; ++i) ASSERT_TRUE(SubmitFloats(*conn, 4, &answered).ok()) << i;
  conn.Open();
  ASSERT_TRUE(WaitFor([&] { return conn->violations() == 1; }));
  EXPECT_NE(conn->fault().find("never sent"), std::string::npos) << conn->fault();
  EXPECT_EQ(answered.calls.load(), 0) << "no request is answered by the made-up completion";
  // The supervisor's answer to a fault: the host killed, the connection
  // closed. Every request ends once, those still waiting included, and
  // nothing is left in the arena.
  conn.KillHost();
  conn->Close(Status::Unavailable("host restarted"));
  EXPECT_EQ(answered.calls.load(), kRequests);
  EXPECT_EQ(conn->arena_used_bytes(), 0u);
}

}  // namespace
}  // namespace es
