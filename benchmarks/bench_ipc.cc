// bench-ipc: the router<->host channel measured against its physical floors,
// all in one run on the same machine, reported as ratios.
//
//   build/bin/bench-ipc [--benchmark_min_time=0.2] [google-benchmark flags]
//
// Each round trip is between two processes (fork; the child attaches to the
// channel through the inherited memfd exactly as a model host does):
//   Channel/sleep   the router copies the payload into the arena, publishes a
//                   RequestDesc; the host, asleep on its futex, wakes, checks
//                   the payload's first and last bytes in place (a model reads
//                   it there too) and publishes a CompletionDesc; the router,
//                   asleep too, wakes and reads it. Spin budget 0.
//   Channel/spin    the same with both sides polling (spin budget large).
//   ChannelSpinBudget the same with spin budgets of 10 to 10,000 polls.
// Floors, same payloads, same run:
//   FutexPingPong   a bare futex ping-pong between two processes
//   SpinPingPong    a bare spin ping-pong on one shared atomic
//   SocketPingPong  a Unix-domain socket carrying the payload one way and a
//                   64-byte reply back (as socket-based worker protocols do)
//   Memcpy          one single-threaded memcpy of the payload
// Plus ChannelPipelined: small requests, up to 64 in flight, one router
// thread and one host thread: requests per second.
#include <benchmark/benchmark.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "ipc/channel.h"
#include "ipc/channel_ends.h"
#include "ipc/futex.h"

namespace {

using es::ipc::Channel;
using es::ipc::ChannelOptions;
using es::ipc::CompletionDesc;
using es::ipc::HostEnd;
using es::ipc::RequestDesc;
using es::ipc::RouterEnd;
using es::ipc::WaitPolicy;

constexpr int64_t kSizes[] = {64, 4 << 10, 64 << 10, 1 << 20, 16 << 20};
constexpr int kBigSpin = 1 << 30;  // "spin forever" in practice: the peer answers within µs

// A child process that lives for one benchmark.
class Child {
 public:
  template <typename Fn>
  explicit Child(Fn fn) {
    pid_ = fork();
    if (pid_ == 0) {
      fn();
      _exit(0);
    }
  }
  ~Child() {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }

 private:
  pid_t pid_;
};

void* SharedPage(size_t bytes) {
  return mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
}

// The host side of the channel benchmarks (runs in the forked child until
// killed): answers every request; with touch_payload it first reads the
// payload's first and last bytes in place, as a model reads its input there.
// The answer is a success (status 0), so only the used part of the
// completion descriptor crosses, as in serving.
[[noreturn]] void EchoHost(int router_fd, WaitPolicy policy, bool touch_payload) {
  auto attached = Channel::Attach(dup(router_fd));
  if (!attached.ok()) _exit(1);
  HostEnd end(&*attached, policy);
  std::atomic<bool> stop{false};
  RequestDesc req;
  CompletionDesc comp{};
  while (true) {
    if (!end.NextRequest(&req)) continue;
    comp.request_id = req.request_id;
    if (touch_payload) {
      const uint8_t* in = attached->arena() + req.inputs[0].offset;
      comp.compute_ns = in[0] + in[req.inputs[0].bytes - 1];
    }
    end.Complete(comp, stop);
  }
}

void ChannelRoundTrip(benchmark::State& state, int spin) {
  const auto bytes = static_cast<uint64_t>(state.range(0));
  ChannelOptions options;
  options.arena_bytes = bytes + 4096;
  auto created = Channel::Create(options);
  if (!created.ok()) {
    state.SkipWithError(created.status().message().c_str());
    return;
  }
  Channel router = std::move(created).value();
  const WaitPolicy policy{spin, 100000};
  std::vector<uint8_t> payload(bytes, 7);
  Child host([&] { EchoHost(router.fd(), policy, /*touch_payload=*/true); });
  RouterEnd end(&router, policy);
  RequestDesc req{};
  req.num_inputs = 1;
  req.inputs[0].bytes = bytes;
  CompletionDesc comp;
  uint64_t id = 0;
  for (auto _ : state) {
    std::memcpy(router.arena(), payload.data(), bytes);  // the one copy, as HostConnection::Submit does
    req.request_id = ++id;
    (void)end.Submit(req);
    while (!end.NextCompletion(&comp)) {
    }
    benchmark::DoNotOptimize(comp.compute_ns);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
}

void BM_ChannelSleep(benchmark::State& state) { ChannelRoundTrip(state, 0); }
void BM_ChannelSpin(benchmark::State& state) { ChannelRoundTrip(state, kBigSpin); }
// range(1) = the spin budget in polls: the figures the default is chosen from.
void BM_ChannelSpinBudget(benchmark::State& state) { ChannelRoundTrip(state, static_cast<int>(state.range(1))); }

void BM_FutexPingPong(benchmark::State& state) {
  auto* word = static_cast<std::atomic<uint32_t>*>(SharedPage(4096));
  word->store(0);
  Child peer([&] {
    uint32_t expect = 1;
    while (true) {
      while (word->load(std::memory_order_acquire) != expect) es::ipc::FutexWait(word, expect - 1, 100000);
      word->store(expect + 1, std::memory_order_release);
      es::ipc::FutexWake(word, 1);
      expect += 2;
    }
  });
  uint32_t value = 0;
  for (auto _ : state) {
    word->store(++value, std::memory_order_release);
    es::ipc::FutexWake(word, 1);
    ++value;
    while (word->load(std::memory_order_acquire) != value) es::ipc::FutexWait(word, value - 1, 100000);
  }
  munmap(word, 4096);
}

void BM_SpinPingPong(benchmark::State& state) {
  auto* word = static_cast<std::atomic<uint32_t>*>(SharedPage(4096));
  word->store(0);
  Child peer([&] {
    uint32_t expect = 1;
    while (true) {
      while (word->load(std::memory_order_acquire) != expect) es::ipc::CpuRelax();
      word->store(expect + 1, std::memory_order_release);
      expect += 2;
    }
  });
  uint32_t value = 0;
  for (auto _ : state) {
    word->store(++value, std::memory_order_release);
    ++value;
    while (word->load(std::memory_order_acquire) != value) es::ipc::CpuRelax();
  }
  munmap(word, 4096);
}

bool ReadAll(int fd, void* buf, size_t n) {
  auto* p = static_cast<uint8_t*>(buf);
  while (n > 0) {
    const ssize_t r = read(fd, p, n);
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

bool WriteAll(int fd, const void* buf, size_t n) {
  const auto* p = static_cast<const uint8_t*>(buf);
  while (n > 0) {
    const ssize_t w = write(fd, p, n);
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

void BM_SocketPingPong(benchmark::State& state) {
  const auto bytes = static_cast<size_t>(state.range(0));
  int fds[2];
  socketpair(AF_UNIX, SOCK_STREAM, 0, fds);
  Child peer([&] {
    close(fds[0]);
    std::vector<uint8_t> buf(bytes);
    uint8_t reply[64] = {};
    while (ReadAll(fds[1], buf.data(), bytes)) {
      reply[0] = buf[0];
      if (!WriteAll(fds[1], reply, sizeof(reply))) break;
    }
  });
  close(fds[1]);
  std::vector<uint8_t> payload(bytes, 7);
  uint8_t reply[64];
  for (auto _ : state) {
    WriteAll(fds[0], payload.data(), bytes);
    ReadAll(fds[0], reply, sizeof(reply));
  }
  close(fds[0]);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
}

void BM_Memcpy(benchmark::State& state) {
  const auto bytes = static_cast<size_t>(state.range(0));
  std::vector<uint8_t> src(bytes, 7), dst(bytes, 0);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), bytes);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
}

void BM_ChannelPipelined(benchmark::State& state) {
  const int window = static_cast<int>(state.range(0));
  ChannelOptions options;
  options.arena_bytes = 1 << 20;
  auto created = Channel::Create(options);
  Channel router = std::move(created).value();
  const WaitPolicy policy{WaitPolicy{}.spin, 100000};
  Child host([&] { EchoHost(router.fd(), policy, /*touch_payload=*/false); });
  RouterEnd end(&router, policy);
  RequestDesc req{};
  req.num_inputs = 1;
  req.inputs[0].bytes = 64;
  CompletionDesc comp;
  int in_flight = 0;
  uint64_t id = 0;
  for (auto _ : state) {
    while (in_flight < window && end.Submit(req).ok()) {
      req.request_id = ++id;
      ++in_flight;
    }
    while (!end.NextCompletion(&comp)) {
    }
    --in_flight;
  }
  while (in_flight > 0) {
    if (end.NextCompletion(&comp)) --in_flight;
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}

void Sizes(benchmark::internal::Benchmark* b) {
  for (int64_t s : kSizes) b->Arg(s);
  b->UseRealTime();
}

BENCHMARK(BM_ChannelSleep)->Apply(Sizes);
BENCHMARK(BM_ChannelSpin)->Apply(Sizes);
BENCHMARK(BM_ChannelSpinBudget)->ArgsProduct({{64}, {10, 100, 1000, 10000}})->UseRealTime();
BENCHMARK(BM_FutexPingPong)->UseRealTime();
BENCHMARK(BM_SpinPingPong)->UseRealTime();
BENCHMARK(BM_SocketPingPong)->Apply(Sizes);
BENCHMARK(BM_Memcpy)->Apply(Sizes);
BENCHMARK(BM_ChannelPipelined)->Arg(64)->UseRealTime();

// Collects each run's real time per iteration so main can print ratios.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs) {
      if (r.run_type != Run::RT_Iteration || r.error_occurred) continue;
      ns_[r.benchmark_name()] = r.GetAdjustedRealTime() * 1e9 /
                                benchmark::GetTimeUnitMultiplier(r.time_unit);
      if (r.benchmark_name().rfind("BM_ChannelPipelined", 0) == 0) {
        auto it = r.counters.find("items_per_second");
        if (it != r.counters.end()) pipelined_rps_ = it->second.value;
      }
    }
  }
  void PrintRatios() const {
    auto get = [&](const std::string& name) {
      auto it = ns_.find(name);
      return it == ns_.end() ? 0.0 : it->second;
    };
    const double futex = get("BM_FutexPingPong/real_time");
    const double spin = get("BM_SpinPingPong/real_time");
    std::printf("\nround trip, ns (ratios to the floors measured above)\n");
    std::printf("%10s %12s %12s %10s %10s %12s %10s %12s\n", "payload", "chan sleep", "chan spin", "/futex",
                "/spin", "socket", "/socket", "/memcpy");
    for (int64_t s : kSizes) {
      // Appended, not "/" + to_string(s): gcc 12 at -O3 warns falsely
      // (-Wrestrict) on operator+(const char*, string&&).
      std::string arg = "/";
      arg += std::to_string(s);
      arg += "/real_time";
      const double sleep_ns = get("BM_ChannelSleep" + arg), spin_ns = get("BM_ChannelSpin" + arg);
      const double sock = get("BM_SocketPingPong" + arg), copy = get("BM_Memcpy" + arg);
      std::printf("%10lld %12.0f %12.0f %10.2f %10.2f %12.0f %10.2f %12.2f\n", static_cast<long long>(s),
                  sleep_ns, spin_ns, sleep_ns / futex, spin_ns / spin, sock, std::min(sleep_ns, spin_ns) / sock,
                  std::min(sleep_ns, spin_ns) / copy);
    }
    std::printf("floors: futex ping-pong %.0f ns, spin ping-pong %.0f ns\n", futex, spin);
    std::printf("64 B round trip by spin budget (default %d polls):", WaitPolicy{}.spin);
    for (int polls : {10, 100, 1000, 10000}) {
      std::printf(" %d: %.0f ns;", polls, get("BM_ChannelSpinBudget/64/" + std::to_string(polls) + "/real_time"));
    }
    std::printf("\n");
    std::printf("pipelined small requests (64 in flight): %.0f requests/s\n", pipelined_rps_);
  }

 private:
  std::map<std::string, double> ns_;
  double pipelined_rps_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  reporter.PrintRatios();
  benchmark::Shutdown();
  return 0;
}
