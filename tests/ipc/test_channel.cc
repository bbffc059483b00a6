#include "ipc/channel.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <future>
#include <set>
#include <thread>
#include <vector>

#include "ipc/channel_ends.h"

namespace es::ipc {
namespace {

Channel MakeChannel(uint64_t arena = 1 << 20) {
  ChannelOptions options;
  options.arena_bytes = arena;
  options.request_slots = 8;
  options.completion_slots = 8;
  auto c = Channel::Create(options);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return std::move(c).value();
}

StatusOr<Channel> AttachDup(const Channel& channel) { return Channel::Attach(dup(channel.fd())); }

TEST(ChannelTest, AttachSeesTheSameSegment) {
  Channel router = MakeChannel();
  auto host = AttachDup(router);
  ASSERT_TRUE(host.ok()) << host.status().ToString();
  EXPECT_EQ(host->arena_bytes(), router.arena_bytes());
  std::memcpy(router.arena(), "hello", 6);
  EXPECT_STREQ(reinterpret_cast<const char*>(host->arena()), "hello");
}

// The segment's size is sealed: a host cannot truncate it under the router's
// mapping (every router access past the new end would be a SIGBUS), nor grow it.
TEST(ChannelTest, SegmentSizeIsSealedAgainstTheHost) {
  Channel router = MakeChannel();
  auto host = AttachDup(router);
  ASSERT_TRUE(host.ok());
  const off_t size = static_cast<off_t>(router.geometry().segment_bytes);
  EXPECT_NE(ftruncate(host->fd(), 4096), 0);
  EXPECT_EQ(errno, EPERM);
  EXPECT_NE(ftruncate(host->fd(), size * 2), 0);
  EXPECT_EQ(errno, EPERM);
  const int seals = fcntl(host->fd(), F_GET_SEALS);
  EXPECT_EQ(seals & (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL), F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
  EXPECT_NE(fcntl(host->fd(), F_ADD_SEALS, F_SEAL_WRITE), 0) << "the seals themselves are sealed";
  // The router's whole mapping is still readable (no SIGBUS).
  volatile uint8_t last = router.arena()[router.arena_bytes() - 1];
  (void)last;
}

// Geometry is read once: a peer that rewrites the header afterwards cannot
// move the arena or resize the rings under this side.
TEST(ChannelTest, GeometryIsSnapshotAtAttach) {
  Channel router = MakeChannel(1 << 20);
  auto host = AttachDup(router);
  ASSERT_TRUE(host.ok());
  uint8_t* const arena = router.arena();
  const uint64_t capacity = router.requests().capacity();
  host->header().arena_offset = 1;
  host->header().arena_bytes = uint64_t{1} << 62;
  host->header().requests.capacity = uint64_t{1} << 40;
  host->header().requests.slots_offset = 12345;
  EXPECT_EQ(router.arena(), arena);
  EXPECT_EQ(router.arena_bytes(), uint64_t{1} << 20);
  EXPECT_EQ(router.requests().capacity(), capacity);
  EXPECT_FALSE(router.ArenaRangeValid(0, (uint64_t{1} << 20) + 1));
  // The ring still works within its real slots.
  RequestDesc request{};
  request.request_id = 42;
  for (uint64_t i = 0; i < capacity; ++i) ASSERT_TRUE(router.requests().TryPush(request));
  EXPECT_FALSE(router.requests().TryPush(request)) << "full at the snapshot capacity";
}

TEST(ChannelTest, BadMagicIsRejected) {
  Channel router = MakeChannel();
  router.header().magic = 0x1234;
  auto host = AttachDup(router);
  ASSERT_FALSE(host.ok());
  EXPECT_NE(host.status().message().find("magic"), std::string::npos);
}

TEST(ChannelTest, LayoutVersionMismatchNamesBothVersions) {
  Channel router = MakeChannel();
  router.header().layout_version = kLayoutVersion + 6;
  auto host = AttachDup(router);
  ASSERT_FALSE(host.ok());
  EXPECT_NE(host.status().message().find(std::to_string(kLayoutVersion + 6)), std::string::npos);
  EXPECT_NE(host.status().message().find(std::to_string(kLayoutVersion)), std::string::npos);
}

TEST(ChannelTest, CorruptRingGeometryIsRejected) {
  Channel router = MakeChannel();
  router.header().requests.slots_offset = router.header().segment_bytes - 10;
  auto host = AttachDup(router);
  ASSERT_FALSE(host.ok());
  EXPECT_NE(host.status().message().find("ring"), std::string::npos);
}

TEST(ChannelTest, ArenaRangeCheckIsOverflowSafe) {
  Channel c = MakeChannel(4096);
  EXPECT_TRUE(c.ArenaRangeValid(0, 4096));
  EXPECT_FALSE(c.ArenaRangeValid(1, 4096));
  EXPECT_FALSE(c.ArenaRangeValid(4097, 0));
  EXPECT_FALSE(c.ArenaRangeValid(8, UINT64_MAX - 4));
}

TEST(ChannelTest, RingIsBoundedAndFifo) {
  Channel c = MakeChannel();
  RequestDesc r{};
  for (uint64_t i = 0; i < 8; ++i) {
    r.request_id = i;
    ASSERT_TRUE(c.requests().TryPush(r));
  }
  EXPECT_FALSE(c.requests().TryPush(r));
  for (uint64_t i = 0; i < 8; ++i) {
    ASSERT_TRUE(c.requests().TryPop(&r));
    EXPECT_EQ(r.request_id, i);
  }
  EXPECT_FALSE(c.requests().TryPop(&r));
}

// Waits for `f` (threads that sleep with no timed sleep); a wake-up lost
// would leave them asleep for good, so after 120 s the test fails and the
// process ends (there is nothing to join).
void AwaitOrDie(std::future<void>& f, const char* what) {
  if (f.wait_for(std::chrono::seconds(120)) == std::future_status::ready) return f.get();
  ADD_FAILURE() << what << " still asleep after 120 s: a wake-up was lost";
  std::_Exit(1);
}

// A consumer asleep is woken once for a burst of pushes: the pushes after
// the first find a wake-up pending and make no futex call (the event count
// `seq` moves once). Without the pending flag each push bumps it.
TEST(ChannelTest, ABurstOfPushesWakesASleeperOnce) {
  Channel c = MakeChannel();
  RingControl& control = c.header().requests;
  auto sleep_until_woken = [&] {
    return std::async(std::launch::async, [&] { c.requests().WaitForData(/*spin=*/0, /*timeout_us=*/-1); });
  };
  std::future<void> consumer = sleep_until_woken();
  while (control.sleepers.load() == 0) std::this_thread::yield();
  const uint32_t before = control.seq.load();
  RequestDesc r{};
  for (uint64_t i = 0; i < 5; ++i) {
    r.request_id = i;
    ASSERT_TRUE(c.requests().TryPush(r));
  }
  AwaitOrDie(consumer, "the consumer");
  EXPECT_EQ(control.seq.load() - before, 1u);
  // Asleep again (the flag cleared on the way): the next push wakes it again.
  for (uint64_t i = 0; i < 5; ++i) ASSERT_TRUE(c.requests().TryPop(&r));
  std::future<void> again = sleep_until_woken();
  while (control.sleepers.load() == 0) std::this_thread::yield();
  ASSERT_TRUE(c.requests().TryPush(r));
  AwaitOrDie(again, "the consumer, asleep a second time,");
  EXPECT_EQ(control.seq.load() - before, 2u);
}

// A real second process: the child attaches through the inherited fd and
// answers each request with the checksum of its payload, so a lost, doubled
// or corrupted request is seen by the parent.
TEST(ChannelTest, CrossProcessRoundTripsWithChecksums) {
  Channel router = MakeChannel();
  constexpr int kRequests = 2000;
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto host = Channel::Attach(dup(router.fd()));
    if (!host.ok()) _exit(10);
    HostEnd end(&*host);
    int served = 0;
    RequestDesc req;
    CompletionDesc comp{};
    std::atomic<bool> stop{false};
    while (served < kRequests) {
      if (!end.NextRequest(&req)) continue;
      uint64_t sum = 0;
      const uint8_t* p = host->arena() + req.inputs[0].offset;
      for (uint64_t i = 0; i < req.inputs[0].bytes; ++i) sum = sum * 131 + p[i];
      comp.request_id = req.request_id;
      comp.compute_ns = sum;
      end.Complete(comp, stop);
      ++served;
    }
    _exit(0);
  }
  RouterEnd end(&router);
  std::set<uint64_t> answered;
  int sent = 0;
  std::vector<uint64_t> expected(kRequests);
  CompletionDesc comp;
  while (static_cast<int>(answered.size()) < kRequests) {
    if (sent < kRequests && sent - static_cast<int>(answered.size()) < 4) {
      RequestDesc req{};
      req.request_id = static_cast<uint64_t>(sent);
      req.num_inputs = 1;
      req.inputs[0].offset = static_cast<uint64_t>(sent % 4) * 4096;
      req.inputs[0].bytes = 1 + static_cast<uint64_t>(sent) % 4000;
      uint8_t* p = router.arena() + req.inputs[0].offset;
      uint64_t sum = 0;
      for (uint64_t i = 0; i < req.inputs[0].bytes; ++i) {
        p[i] = static_cast<uint8_t>(i * 7 + static_cast<uint64_t>(sent));
        sum = sum * 131 + p[i];
      }
      expected[sent] = sum;
      ASSERT_TRUE(end.Submit(req).ok());
      ++sent;
      continue;
    }
    if (!end.NextCompletion(&comp)) continue;
    ASSERT_LT(comp.request_id, static_cast<uint64_t>(kRequests));
    EXPECT_TRUE(answered.insert(comp.request_id).second) << "answered twice: " << comp.request_id;
    EXPECT_EQ(comp.compute_ns, expected[comp.request_id]);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

// Many router threads, several host threads completing out of order: every
// request answered exactly once with its own payload's checksum.
class ChannelStressTest : public ::testing::TestWithParam<std::tuple<int, int>> {};

void RunStress(int submitters, int executors, WaitPolicy wait);

TEST_P(ChannelStressTest, EveryRequestAnsweredOnce) {
  const auto [submitters, executors] = GetParam();
  RunStress(submitters, executors, WaitPolicy{});
}

// Every wait sleeps at once and for as long as it takes (no poll, no timed
// sleep), so a wake-up the protocol lost would leave a side asleep for good:
// the run must finish, which with wake-ups intact takes about a second.
TEST_P(ChannelStressTest, NoWakeUpIsLostWhenEveryWaitSleeps) {
  const int submitters = std::get<0>(GetParam());
  const int executors = std::get<1>(GetParam());
  std::future<void> run = std::async(std::launch::async, [&] {
    RunStress(submitters, executors, WaitPolicy{/*spin=*/0, /*sleep_timeout_us=*/-1});
  });
  AwaitOrDie(run, "the stress run");
}

void RunStress(int submitters, int executors, WaitPolicy wait) {
  ChannelOptions options;
  options.arena_bytes = 1 << 20;
  options.request_slots = 16;
  options.completion_slots = 16;
  auto created = Channel::Create(options);
  ASSERT_TRUE(created.ok());
  Channel router = std::move(created).value();
  auto attached = AttachDup(router);
  ASSERT_TRUE(attached.ok());
  Channel host = std::move(attached).value();

  constexpr int kPerThread = 3000;
  const int total = submitters * kPerThread;
  std::atomic<bool> stop{false};
  std::atomic<int> exited{0};
  HostEnd host_end(&host, wait);
  std::vector<std::thread> host_threads;
  for (int e = 0; e < executors; ++e) {
    host_threads.emplace_back([&] {
      RequestDesc req;
      CompletionDesc comp{};
      while (!stop.load()) {
        if (!host_end.NextRequest(&req)) continue;
        if (req.request_id % 7 == 0) std::this_thread::yield();  // complete out of order
        const uint64_t* p = reinterpret_cast<const uint64_t*>(host.arena() + req.inputs[0].offset);
        comp.request_id = req.request_id;
        comp.compute_ns = p[0] ^ p[1];
        host_end.Complete(comp, stop);
      }
      exited++;
    });
  }
  RouterEnd router_end(&router, wait);
  std::vector<std::atomic<int>> answers(total);
  std::atomic<int> done{0}, bad{0};
  std::thread completer([&] {
    CompletionDesc comp;
    while (done.load() < total) {
      if (!router_end.NextCompletion(&comp)) continue;
      const uint64_t id = comp.request_id;
      if (id >= static_cast<uint64_t>(total) || comp.compute_ns != (id * 0x9E3779B97F4A7C15ULL ^ ~id)) bad++;
      if (id < static_cast<uint64_t>(total)) answers[id]++;
      done++;
    }
  });
  // Each submitter owns 64 payload slots and reuses one only after the request
  // that used it before was answered.
  constexpr int kSlots = 64;
  std::vector<std::thread> routers;
  for (int s = 0; s < submitters; ++s) {
    routers.emplace_back([&, s] {
      for (int i = 0; i < kPerThread; ++i) {
        const uint64_t id = static_cast<uint64_t>(s * kPerThread + i);
        if (i >= kSlots) {
          while (answers[id - kSlots].load() == 0) std::this_thread::yield();
        }
        RequestDesc req{};
        req.request_id = id;
        req.num_inputs = 1;
        req.inputs[0].offset = static_cast<uint64_t>(s * kSlots + i % kSlots) * 64;
        auto* p = reinterpret_cast<uint64_t*>(router.arena() + req.inputs[0].offset);
        p[0] = id * 0x9E3779B97F4A7C15ULL;
        p[1] = ~id;
        while (!router_end.Submit(req).ok()) std::this_thread::yield();
      }
    });
  }
  for (auto& t : routers) t.join();
  completer.join();
  stop.store(true);
  // Until every executor saw `stop`: one that checked it just before and
  // then went to sleep missed the wake-up before (with no timed sleep it
  // would sleep for good).
  while (exited.load() < executors) {
    host.requests().NotifyConsumer();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  for (auto& t : host_threads) t.join();
  EXPECT_EQ(bad.load(), 0);
  for (int i = 0; i < total; ++i) ASSERT_EQ(answers[i].load(), 1) << "request " << i;
}

INSTANTIATE_TEST_SUITE_P(Threads, ChannelStressTest,
                         ::testing::Combine(::testing::Values(1, 4), ::testing::Values(1, 3)));

}  // namespace
}  // namespace es::ipc
