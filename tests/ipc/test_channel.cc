#include "ipc/channel.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <future>
#include <set>
#include <string>
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

// The calling thread's id, for ThreadAsleep.
pid_t ThisThread() { return static_cast<pid_t>(syscall(SYS_gettid)); }

// Whether thread `tid` of this process sleeps in the kernel ('S' in
// /proc/self/task/TID/stat): a consumer counted in `sleepers` may still be
// on its way to the futex (its re-check of the ring comes after).
bool ThreadAsleep(pid_t tid) {
  std::ifstream stat("/proc/self/task/" + std::to_string(tid) + "/stat");
  std::string line;
  std::getline(stat, line);
  const size_t paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] == 'S';
}

// Runs `wait` (a consumer's sleep, then what it does once woken) on a thread
// of its own and returns once that thread sleeps on `control`'s futex.
template <typename F>
auto StartAsleep(RingControl& control, F wait) {
  std::promise<pid_t> tid;
  std::future<pid_t> known = tid.get_future();
  auto done = std::async(std::launch::async, [wait, &tid] {
    tid.set_value(ThisThread());
    return wait();
  });
  const pid_t thread = known.get();
  while (control.sleepers.load() == 0 || !ThreadAsleep(thread)) std::this_thread::yield();
  return done;
}

// A consumer asleep is woken once for a burst of pushes: the pushes after
// the first find a wake-up pending and make no futex call (the event count
// `seq` moves once). Without the pending flag each push bumps it.
TEST(ChannelTest, ABurstOfPushesWakesASleeperOnce) {
  Channel c = MakeChannel();
  RingControl& control = c.header().requests;
  auto sleep_until_woken = [&] {
    return StartAsleep(control, [&] { c.requests().WaitForData(/*spin=*/0, /*timeout_us=*/-1); });
  };
  std::future<void> consumer = sleep_until_woken();
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
  ASSERT_TRUE(c.requests().TryPush(r));
  AwaitOrDie(again, "the consumer, asleep a second time,");
  EXPECT_EQ(control.seq.load() - before, 2u);
}

// The router's completion thread asleep (it waits for as long as it takes),
// and the host's side of the same channel.
struct HeldWakeFixture {
  Channel channel = MakeChannel();
  RingControl& control = channel.header().completions;
  HostEnd host{&channel, WaitPolicy{/*spin=*/0, /*sleep_timeout_us=*/1000}};
  std::atomic<bool> stop{false};

  // Starts a router thread that sleeps until a completion comes, then takes
  // every completion there is; returns once it is asleep.
  std::future<int> RouterAsleep() {
    return StartAsleep(control, [this] {
      channel.completions().WaitForData(/*spin=*/0, /*timeout_us=*/-1);
      CompletionDesc c;
      int n = 0;
      while (channel.completions().TryPop(&c)) ++n;
      return n;
    });
  }
  // A request of `burst` that says more follow (or not).
  static RequestDesc Request(uint32_t burst, bool more_follow) {
    RequestDesc r{};
    r.burst = burst;
    r.flags = more_follow ? kMoreFollow : 0;
    return r;
  }
  // The host publishes the completion of such a request.
  bool Publish(bool more_follow, uint32_t burst = 7) {
    const RequestDesc answered = Request(burst, more_follow);
    return host.Complete(CompletionDesc{}, stop, &answered);
  }
  // Whether the router thread is still asleep a while later.
  static bool StillAsleep(std::future<int>& taken) {
    return taken.wait_for(std::chrono::milliseconds(50)) == std::future_status::timeout;
  }
  int AwaitTaken(std::future<int>& taken, const char* what) {
    if (taken.wait_for(std::chrono::seconds(120)) == std::future_status::ready) return taken.get();
    ADD_FAILURE() << what << ": the router still asleep after 120 s";
    std::_Exit(1);
  }
};

// A completion published with its wake-up held does not wake the router;
// the host going idle (NextRequest finding no request) does, for it.
TEST(ChannelTest, AHeldCompletionWakesTheRouterWhenTheHostGoesIdle) {
  HeldWakeFixture f;
  std::future<int> taken = f.RouterAsleep();
  const uint32_t before = f.control.seq.load();
  ASSERT_TRUE(f.Publish(/*more_follow=*/true));
  EXPECT_TRUE(HeldWakeFixture::StillAsleep(taken));
  EXPECT_EQ(f.control.seq.load(), before);
  RequestDesc r;
  EXPECT_FALSE(f.host.NextRequest(&r));  // none: it wakes the router, then waits 1 ms
  EXPECT_EQ(f.AwaitTaken(taken, "after the host went idle"), 1);
  EXPECT_EQ(f.control.seq.load() - before, 1u);
}

// A completion that is not held wakes the router for the held ones before
// it, with one wake-up.
TEST(ChannelTest, TheNextCompletionNotHeldWakesTheRouterForTheHeldOnes) {
  HeldWakeFixture f;
  std::future<int> taken = f.RouterAsleep();
  const uint32_t before = f.control.seq.load();
  ASSERT_TRUE(f.Publish(/*more_follow=*/true));
  ASSERT_TRUE(f.Publish(/*more_follow=*/true));
  EXPECT_TRUE(HeldWakeFixture::StillAsleep(taken));
  ASSERT_TRUE(f.Publish(/*more_follow=*/false));
  EXPECT_EQ(f.AwaitTaken(taken, "after a completion not held"), 3);
  EXPECT_EQ(f.control.seq.load() - before, 1u);
}

// The host takes a request of the held completions' burst without waking
// the router (the ensemble waits for that one too), but wakes it before it
// returns a request of another burst, or of none, which may run long.
TEST(ChannelTest, ARequestOfAnotherBurstWakesTheRouterBeforeItRuns) {
  HeldWakeFixture f;
  std::future<int> taken = f.RouterAsleep();
  ASSERT_TRUE(f.Publish(/*more_follow=*/true));
  RequestDesc r = HeldWakeFixture::Request(7, /*more_follow=*/false);
  ASSERT_TRUE(f.channel.requests().TryPush(r));
  ASSERT_TRUE(f.host.NextRequest(&r));  // the same burst's
  EXPECT_TRUE(HeldWakeFixture::StillAsleep(taken));
  r = HeldWakeFixture::Request(8, /*more_follow=*/false);
  ASSERT_TRUE(f.channel.requests().TryPush(r));
  ASSERT_TRUE(f.host.NextRequest(&r));  // another burst's
  EXPECT_EQ(r.burst, 8u);
  EXPECT_EQ(f.AwaitTaken(taken, "after a request of another burst"), 1);
}

// Held completions are of one burst: a completion of another burst wakes
// the router (the other burst's next request would not), though it asks to
// be held too.
TEST(ChannelTest, ACompletionOfAnotherBurstWakesTheRouter) {
  HeldWakeFixture f;
  std::future<int> taken = f.RouterAsleep();
  ASSERT_TRUE(f.Publish(/*more_follow=*/true, /*burst=*/7));
  ASSERT_TRUE(f.Publish(/*more_follow=*/true, /*burst=*/8));
  EXPECT_EQ(f.AwaitTaken(taken, "after a completion of another burst"), 2);
}

// An executor that stops wakes the router for what it held.
TEST(ChannelTest, WakeRouterIfHeldWakesItForTheHeldOnes) {
  HeldWakeFixture f;
  std::future<int> taken = f.RouterAsleep();
  f.host.WakeRouterIfHeld();  // nothing held: no wake-up
  EXPECT_TRUE(HeldWakeFixture::StillAsleep(taken));
  ASSERT_TRUE(f.Publish(/*more_follow=*/true));
  EXPECT_TRUE(HeldWakeFixture::StillAsleep(taken));
  f.host.WakeRouterIfHeld();
  EXPECT_EQ(f.AwaitTaken(taken, "after WakeRouterIfHeld"), 1);
}

// A wake-up is held back at most kMaxHeldWakeNs: a completion published
// later than that after the first held one wakes the router though it asks
// to be held too.
TEST(ChannelTest, AWakeUpHeldTooLongIsGivenByTheNextCompletion) {
  HeldWakeFixture f;
  std::future<int> taken = f.RouterAsleep();
  ASSERT_TRUE(f.Publish(/*more_follow=*/true));
  std::this_thread::sleep_for(std::chrono::nanoseconds(2 * HostEnd::kMaxHeldWakeNs));
  EXPECT_TRUE(HeldWakeFixture::StillAsleep(taken));  // nothing wakes it by itself
  ASSERT_TRUE(f.Publish(/*more_follow=*/true));
  EXPECT_EQ(f.AwaitTaken(taken, "after a completion past the bound"), 2);
}

// A completion ring filled with held completions: the host, waiting for
// room, wakes the router to drain it (or both would wait for good).
TEST(ChannelTest, AFullRingOfHeldCompletionsWakesTheRouter) {
  HeldWakeFixture f;
  const uint64_t slots = f.channel.completions().capacity();
  std::future<int> drained = StartAsleep(f.control, [&] {  // asleep before the ring fills
    int n = 0;
    CompletionDesc c;
    while (n < static_cast<int>(slots) + 1) {
      f.channel.completions().WaitForData(/*spin=*/0, /*timeout_us=*/-1);
      while (f.channel.completions().TryPop(&c)) ++n;
    }
    return n;
  });
  for (uint64_t i = 0; i < slots + 1; ++i) ASSERT_TRUE(f.Publish(/*more_follow=*/true));
  RequestDesc r;
  f.host.NextRequest(&r);  // the last one's wake-up
  EXPECT_EQ(f.AwaitTaken(drained, "with a full ring"), static_cast<int>(slots) + 1);
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

// `more_follow`: the requests come in bursts of four, each but the last
// saying kMoreFollow (the host holds the wake-up of its completion).
void RunStress(int submitters, int executors, WaitPolicy wait, bool more_follow = false);

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

// The same with completions whose wake-up the host holds back (requests
// that say kMoreFollow, as an ensemble's member calls do, and sometimes
// nothing after them): every held completion must still wake the router,
// by a later one or by the host going idle, or the run never ends.
TEST_P(ChannelStressTest, NoHeldCompletionIsLeftUnwoken) {
  const int submitters = std::get<0>(GetParam());
  const int executors = std::get<1>(GetParam());
  std::future<void> run = std::async(std::launch::async, [&] {
    RunStress(submitters, executors, WaitPolicy{/*spin=*/0, /*sleep_timeout_us=*/-1}, /*more_follow=*/true);
  });
  AwaitOrDie(run, "the stress run with held wake-ups");
}

void RunStress(int submitters, int executors, WaitPolicy wait, bool more_follow) {
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
        host_end.Complete(comp, stop, &req);
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
        if (more_follow) {  // bursts of four, one submitter's each
          req.burst = static_cast<uint32_t>(id / 4 + 1);
          if (i % 4 != 3) req.flags = kMoreFollow;
        }
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
