// ensemble-lying-host: a model host that lies. Fault injection for the
// router's isolation (tests/integration/test_isolation.cc and
// benchmarks/run_chaos.sh); never part of a deployment.
//
// It takes ensemble-model-host's command line (only --channel-fd matters),
// attaches to the channel, says yes to every load and unload, and serves
// every request as an honest echo: its first output is a copy of its first
// input (same datatype, same shape), which fits any model whose one output
// has the input's type and dims. It loads no model. Some completions are lies:
//
//   ES_LIE_MODE=random     (default) each completion is a lie with
//                          probability ES_LIE_PERCENT (default 10)
//   ES_LIE_MODE=on-signal  honest until SIGUSR1, then the next ES_LIE_COUNT
//                          (default 50) completions are lies
//   ES_LIE_MODE=scribble   honest answers, while a second thread keeps
//                          writing garbage into the segment's header
//                          (geometry, executor slots, host message, metrics)
//   ES_LIE_MODE=never      always honest
//
// A lie is one of these adversarial completions: an output past
// the arena's end, one pointing into another request's input or output
// region (whose bytes are another client's: the host sometimes holds a
// request back unanswered so that a lie can aim at a request still in
// flight), one straddling the end of its own region, huge or wrapping byte
// counts and shapes, wrong datatypes, ranks past the limit, counts past the
// limit, status codes outside the closed set, made-up and replayed request
// ids, torn descriptors (fields of two requests mixed), and requests dropped
// without a word. The router must reject each one before reading a byte for
// it, and find the dropped ones.
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>

#include "ipc/channel.h"
#include "ipc/channel_ends.h"

namespace {

std::atomic<int> g_lies_owed{0};
std::atomic<bool> g_stop{false};

int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::atoi(v) : fallback;
}

void OnSigusr1(int) { g_lies_owed.store(EnvInt("ES_LIE_COUNT", 50)); }

void Heartbeat(es::ipc::Channel* channel, pid_t router) {
  auto& h = channel->header();
  while (!g_stop.load()) {
    h.heartbeat.fetch_add(1, std::memory_order_relaxed);
    if (h.stop_requested.load() != 0 || getppid() != router) g_stop.store(true);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  channel->requests().NotifyConsumer();
}

// The honest answer: the first input copied into the output region.
void Echo(es::ipc::Channel& channel, const es::ipc::RequestDesc& req, es::ipc::CompletionDesc* c) {
  const es::ipc::TensorDesc& in = req.inputs[0];
  c->request_id = req.request_id;
  c->message[0] = '\0';
  if (req.num_inputs == 0 || !channel.ArenaRangeValid(in.offset, in.bytes) || in.bytes > req.output_capacity ||
      !channel.ArenaRangeValid(req.output_offset, req.output_capacity)) {
    c->status_code = 3;  // INVALID_ARGUMENT
    c->num_outputs = 0;
    std::snprintf(c->message, sizeof(c->message), "lying host: cannot echo this request");
    return;
  }
  std::memmove(channel.arena() + req.output_offset, channel.arena() + in.offset, in.bytes);
  c->status_code = 0;
  c->num_outputs = 1;
  c->outputs[0] = in;
  c->outputs[0].offset = req.output_offset;
}

// Whether `t` lies wholly inside the output region reserved for `req`.
bool InsideOwnOutputRegion(const es::ipc::TensorDesc& t, const es::ipc::RequestDesc& req) {
  return t.offset >= req.output_offset && t.bytes <= req.output_capacity &&
         t.offset - req.output_offset <= req.output_capacity - t.bytes;
}

// Turns an honest completion into lie number `kind`. `previous` is the
// request served before this one (its regions belong to another client).
void Lie(int kind, const es::ipc::Channel& channel, const es::ipc::RequestDesc& req,
         const es::ipc::RequestDesc& previous, es::ipc::CompletionDesc* c, std::mt19937_64& rng) {
  es::ipc::TensorDesc& out = c->outputs[0];
  c->status_code = 0;
  c->num_outputs = 1;
  // Every lie must be one the protocol can tell. Once `previous` is
  // answered its regions are free, and this request's output region may
  // be carved out of them: "another request's bytes" then point inside
  // this request's own region, at whatever the arena held there before.
  // That answer is well-formed; a wrong model (which sees every input in
  // the arena) could give it too, and no router can tell it from a right
  // one. Such a lie is turned into one past the arena instead. (For the
  // same reason the straddling lie keeps half its bytes past the end: a
  // one-element answer 4 bytes before the end would fit.)
  const auto aim_outside = [&] {
    if (InsideOwnOutputRegion(out, req)) out.offset = channel.arena_bytes() + (rng() % 4096);
  };
  switch (kind) {
    case 0: out.offset = channel.arena_bytes() + (rng() % 4096); break;          // past the arena
    case 1: out = previous.inputs[0]; aim_outside(); break;                        // another client's input
    case 2: out.offset = previous.output_offset; aim_outside(); break;             // another request's output
    case 3: out.offset = req.output_offset + req.output_capacity - out.bytes / 2; break;  // straddles its end
    case 4: out.bytes = uint64_t{1} << 62; break;                                  // huge byte count
    case 5: out.ndim = 2; out.dims[0] = int64_t{1} << 62; out.dims[1] = 4; out.bytes = 0; break;  // wraps to 0
    case 6: out.datatype = out.datatype == 8 ? 9 : 8; break;                       // wrong datatype
    case 7: out.datatype = 0xdeadbeef; break;                                      // no datatype at all
    case 8: out.ndim = 9 + static_cast<uint32_t>(rng() % 1000); break;            // rank past the limit
    case 9: c->num_outputs = 3 + static_cast<uint32_t>(rng() % 1000); break;      // count past the limit
    case 10: c->num_outputs = 0; break;                                            // no outputs
    case 11: c->status_code = 17 + static_cast<uint32_t>(rng() % 100000); break;  // unknown status code
    case 12: c->request_id = req.request_id + 1000003; break;                      // made-up id
    case 13: c->request_id = previous.request_id; break;                           // replayed id
    case 14: out.dims[0] = -1; break;                                              // negative dim
    case 15: out.bytes = out.bytes + 4; break;                                     // bytes disagree with dims
    case 16:                                                                       // torn: two requests mixed
      out.offset = previous.output_offset;
      out.bytes = previous.output_capacity;
      break;
    default:  // 17: dropped (the caller sends nothing)
      break;
  }
}

constexpr int kLieKinds = 18;
constexpr int kDropped = 17;

// ES_LIE_MODE=scribble: garbage into the fields of the header the router
// must never trust after attach, over and over, while requests flow.
void Scribble(es::ipc::Channel* channel) {
  std::mt19937_64 rng(static_cast<uint64_t>(getpid()) * 31);
  auto& h = channel->header();
  while (!g_stop.load()) {
    h.arena_offset = rng();
    h.arena_bytes = rng();
    h.segment_bytes = rng();
    h.requests.capacity = rng();
    h.requests.slots_offset = rng();
    h.completions.capacity = rng();
    h.completions.slots_offset = rng();
    std::memset(h.host_message, 'A' + static_cast<int>(rng() % 26), sizeof(h.host_message));  // no NUL
    h.host_metrics.resident_bytes.store(rng());
    h.host_metrics.cpu_ns.store(rng());
    h.host_metrics.publishes.fetch_add(1);
    // An idle executor slot claiming a request that is not running.
    es::ipc::ExecutorSlot& slot = h.executors[1 + rng() % (es::ipc::kMaxExecutors - 1)];
    slot.started_ns.store(rng());
    slot.request_id.store(rng() % 4 == 0 ? 0 : rng());
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

}  // namespace

int main(int argc, char** argv) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  signal(SIGTERM, SIG_IGN);
  signal(SIGUSR1, OnSigusr1);
  int fd = -1;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--channel-fd") fd = std::atoi(argv[i + 1]);
  }
  auto attached = es::ipc::Channel::Attach(fd);
  if (!attached.ok()) {
    std::fprintf(stderr, "ensemble-lying-host: %s\n", attached.status().message().c_str());
    return 1;
  }
  es::ipc::Channel channel = std::move(attached).value();
  const std::string mode = std::getenv("ES_LIE_MODE") != nullptr ? std::getenv("ES_LIE_MODE") : "random";
  const int percent = EnvInt("ES_LIE_PERCENT", 10);
  auto& header = channel.header();
  header.host_pid.store(getpid());
  std::thread heartbeat(Heartbeat, &channel, header.router_pid);
  header.host_state.store(static_cast<uint32_t>(es::ipc::HostState::kReady), std::memory_order_release);
  std::fprintf(stderr, "ensemble-lying-host: pid %d, mode %s\n", getpid(), mode.c_str());

  std::mt19937_64 rng(static_cast<uint64_t>(getpid()));
  std::thread scribbler;
  if (mode == "scribble") scribbler = std::thread(Scribble, &channel);
  es::ipc::HostEnd end(&channel);
  es::ipc::RequestDesc req{};
  es::ipc::RequestDesc previous{};  // answered: its regions may already be another request's
  es::ipc::RequestDesc held{};      // taken but not yet answered: still in flight
  es::ipc::CompletionDesc c{};
  auto answer_held = [&] {
    if (held.request_id == 0) return;
    es::ipc::CompletionDesc hc{};
    Echo(channel, held, &hc);
    end.Complete(hc, g_stop);
    previous = held;
    held = {};
  };
  while (!g_stop.load()) {
    if (!end.NextRequest(&req)) {
      answer_held();
      continue;
    }
    if (req.kind != static_cast<uint32_t>(es::ipc::RequestKind::kInfer)) {
      // Load and unload: it loads nothing (it echoes), and says yes.
      es::ipc::CompletionDesc ok{};
      ok.request_id = req.request_id;
      if (!end.Complete(ok, g_stop)) break;
      continue;
    }
    bool lie = false;
    if (mode == "random") lie = static_cast<int>(rng() % 100) < percent;
    if (mode == "on-signal" && g_lies_owed.load() > 0) lie = g_lies_owed.fetch_sub(1) > 0;
    if (lie && held.request_id == 0 && rng() % 2 == 0) {
      held = req;  // the next lie can aim at this request while it is in flight
      continue;
    }
    Echo(channel, req, &c);
    const es::ipc::RequestDesc& other = held.request_id != 0 ? held : previous;
    if (lie && other.request_id != 0) {
      const int kind = static_cast<int>(rng() % kLieKinds);
      if (kind == kDropped) {
        answer_held();
        continue;
      }
      Lie(kind, channel, req, other, &c, rng);
      if (kind == 12 || kind == 13) {
        // A completion for no request in flight, then the real answer.
        end.Complete(c, g_stop);
        c.request_id = req.request_id;
      }
    }
    if (!end.Complete(c, g_stop)) break;
    answer_held();
    previous = req;
  }
  if (scribbler.joinable()) scribbler.join();
  heartbeat.join();
  return 0;
}
