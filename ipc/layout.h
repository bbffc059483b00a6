// The shared-memory layout of one router<->host channel.
//
// A channel is one memfd-backed segment:
//
//   [ChannelHeader | request ring | completion ring | tensor arena]
//
// Everything in it is trivially copyable and addressed by byte offsets from
// the segment base, never by pointers, because the two processes map it at
// different addresses. The header carries a magic number and a layout
// version, checked on attach, so a host built from another revision fails
// with a clear error instead of misreading descriptors.
//
// Descriptors have fixed sizes (no variable-length fields) so that a ring slot
// is one plain copy; their sizes are multiples of 64 bytes so that adjacent
// slots never share a cache line between a writer and a reader.
//
// Append-only rule: changing any struct here means bumping kLayoutVersion.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace es::ipc {

inline constexpr uint64_t kMagic = 0x314E484343504945ULL;  // "EIPCCHN1" little-endian
inline constexpr uint32_t kLayoutVersion = 8;  // 2: host_metrics; 3: executors; 4: RequestDesc::kind;
                                               // 5: RingControl::wake_pending; 6: kLogSettings;
                                               // 7: CompletionDesc's host timestamps; 8: RequestDesc::flags
inline constexpr size_t kMaxExecutors = 64;  // executor threads per host (hosts[].executors)
inline constexpr size_t kCacheLine = 64;
inline constexpr size_t kMaxTensors = 8;     // inputs or outputs per request
inline constexpr size_t kMaxDims = 8;        // rank of any tensor
inline constexpr size_t kMaxModelName = 64;  // including the terminating NUL
inline constexpr size_t kMaxMessage = 216;   // error text in a completion
inline constexpr size_t kHostMessage = 1024; // host start-up error text

// One tensor inside the arena. For inputs `bytes` is the data size; for
// outputs it is what the host wrote.
struct TensorDesc {
  uint64_t offset;  // from the arena base
  uint64_t bytes;
  uint32_t datatype;  // es::DataType value
  uint32_t ndim;
  int64_t dims[kMaxDims];
};
static_assert(std::is_trivially_copyable_v<TensorDesc>);
static_assert(sizeof(TensorDesc) == 88);

// What a RequestDesc asks of the host. The router alone decides which model
// versions a host holds: it loads and unloads them with control requests
// on the same ring as inference (so a load is ordered after the requests
// submitted before it), and a host never reads the repository by itself.
enum class RequestKind : uint32_t {
  kInfer = 0,   // run `model` (version) on the inputs
  kLoad = 1,    // load `model` (version): input 0 holds its spec (UINT8,
                // config/host_model_spec.h); answered with no outputs
  kUnload = 2,  // drop `model` (version) once its running requests end; no inputs, no outputs
  kLogSettings = 3,  // log with the settings in input 0 (UINT8, EncodeLogSettings's text,
                     // common/log_setup.h); no model, no outputs
};

// RequestDesc::flags bits.
//
// kMoreFollow: the router is submitting more requests of the same burst
// (RequestDesc::burst: an ensemble's member calls, submitted one after
// another, all of which it waits for) right behind this one, and the
// completion of the burst's last will wake it; the host may publish this
// one's completion without waking the router's completion thread for it. A
// hint only: the host still wakes the router before it runs a request of
// another burst, before it waits for requests, and with a completion it
// publishes long enough after the first one it held (ipc::HostEnd), so a
// wrong hint can only delay a completion, never lose it.
inline constexpr uint32_t kMoreFollow = 1u;

// Router -> host: run `model` (version) on the inputs and write the outputs
// into [output_offset, output_offset + output_capacity) of the arena, or
// (kind != kInfer) a control request, answered with a status only.
struct alignas(kCacheLine) RequestDesc {
  uint64_t request_id;
  int64_t version;
  uint64_t output_offset;
  uint64_t output_capacity;
  uint32_t num_inputs;
  uint32_t kind;   // RequestKind
  uint32_t flags;  // kMoreFollow; other bits are ignored
  uint32_t burst;  // the submission burst it belongs to (kMoreFollow); 0: none
  char model[kMaxModelName];
  TensorDesc inputs[kMaxTensors];
};
static_assert(std::is_trivially_copyable_v<RequestDesc>);
static_assert(sizeof(RequestDesc) % kCacheLine == 0);
static_assert(sizeof(RequestDesc) == 832);

// Host -> router: the outcome of one request. status_code is an
// es::StatusCode; on error `message` holds the reason (NUL-terminated).
// The timestamps are the host's steady clock (CLOCK_MONOTONIC, which all
// processes of one machine share), for request traces; the router treats
// them as claims, checked against its own times of the call.
struct alignas(kCacheLine) CompletionDesc {
  uint64_t request_id;
  uint32_t status_code;
  uint32_t num_outputs;
  uint64_t compute_ns;        // time the host spent running the model
  uint64_t received_ns;       // the host took the request off the ring
  uint64_t compute_start_ns;  // the run began (it ended compute_ns later)
  TensorDesc outputs[kMaxTensors];
  char message[kMaxMessage];
};
static_assert(std::is_trivially_copyable_v<CompletionDesc>);
static_assert(sizeof(CompletionDesc) % kCacheLine == 0);
static_assert(sizeof(CompletionDesc) == 960);

// The bytes of a descriptor that carry information: the fixed head plus the
// tensors actually used (and the message only on error). The rings copy just
// these, because every byte crosses between cores: a 1-input request is 184
// bytes (3 cache lines) instead of 832. Counts are clamped, so a corrupt
// count can never make a copy leave its slot.
//
// The consumer calls this on the slot itself, which the peer may be writing
// at that moment: each count is loaded exactly once (LoadOnce), so the
// compiler cannot re-read it after the clamp. The copy that follows may
// still hold counts that disagree with the bytes copied (a torn write); the
// side that reads it validates every field anyway.
inline uint32_t LoadOnce(const uint32_t& value) { return __atomic_load_n(&value, __ATOMIC_RELAXED); }
inline size_t UsedBytes(const RequestDesc& d) {
  const uint32_t count = LoadOnce(d.num_inputs);
  const size_t n = count < kMaxTensors ? count : kMaxTensors;
  return offsetof(RequestDesc, inputs) + n * sizeof(TensorDesc);
}
inline size_t UsedBytes(const CompletionDesc& d) {
  if (LoadOnce(d.status_code) != 0) return sizeof(CompletionDesc);
  const uint32_t count = LoadOnce(d.num_outputs);
  const size_t n = count < kMaxTensors ? count : kMaxTensors;
  return offsetof(CompletionDesc, outputs) + n * sizeof(TensorDesc);
}

// The control block of one single-producer single-consumer ring. head and tail
// live on their own cache lines so the two sides do not false-share. `seq` is
// the futex word the consumer sleeps on; `sleepers` lets the producer skip the
// wake syscall when nobody sleeps, and `wake_pending` when a wake-up is
// already on its way (set by the producer that woke, cleared by a consumer
// before it announces itself asleep again; see ring.h).
struct RingControl {
  alignas(kCacheLine) std::atomic<uint64_t> head;  // next slot to read (consumer)
  alignas(kCacheLine) std::atomic<uint64_t> tail;  // next slot to write (producer)
  alignas(kCacheLine) std::atomic<uint32_t> seq;
  std::atomic<uint32_t> sleepers;
  uint64_t capacity;      // slots, a power of two
  uint64_t slots_offset;  // from the segment base
  std::atomic<uint32_t> wake_pending;
};
static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(std::atomic<uint32_t>::is_always_lock_free);
static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t), "futex word must be 32 bits");
static_assert(std::is_standard_layout_v<RingControl>);

enum class HostState : uint32_t { kStarting = 0, kReady = 1, kFailed = 2, kStopping = 3 };

// What a host tells the router about itself for /metrics, published by the
// host's heartbeat thread (every 100 ms) and read by the router's supervisor.
// One writer (the host), one reader (the router); relaxed atomics because
// every field is an independent gauge or counter: no reader needs two fields
// to agree. The fields are process-wide figures of the current incarnation;
// the router turns cpu_ns into a counter that survives restarts. Its own
// cache line, so the host's writes never touch the rings' lines.
struct alignas(kCacheLine) HostMetricsBlock {
  std::atomic<uint64_t> resident_bytes;          // RSS (/proc/self/statm)
  std::atomic<uint64_t> cpu_ns;                  // user + system CPU time so far
  std::atomic<uint64_t> device_allocated_bytes;  // CUDA caching allocator; 0 on CPU
  std::atomic<uint64_t> device_reserved_bytes;   // CUDA caching allocator; 0 on CPU
  std::atomic<uint64_t> publishes;               // bumped after each update; 0 = none yet
};
static_assert(std::is_standard_layout_v<HostMetricsBlock>);
static_assert(sizeof(HostMetricsBlock) == kCacheLine);

// What one host executor thread is computing, for the router's hung-forward
// watchdog: the host stores started_ns (CLOCK_MONOTONIC, the clock both
// processes share) and then request_id before it runs a request, and
// request_id = 0 when it is done. The router only reads. A host that lied
// here could at worst get itself killed or escape the watchdog for its own
// requests; it cannot make the router read anything out of bounds. Its own
// cache line, so two executors never share one.
struct alignas(kCacheLine) ExecutorSlot {
  std::atomic<uint64_t> request_id;  // 0 = idle
  std::atomic<uint64_t> started_ns;
};
static_assert(std::is_standard_layout_v<ExecutorSlot>);
static_assert(sizeof(ExecutorSlot) == kCacheLine);

struct alignas(kCacheLine) ChannelHeader {
  uint64_t magic;
  uint32_t layout_version;
  uint32_t reserved;
  uint64_t segment_bytes;
  uint64_t arena_offset;  // from the segment base
  uint64_t arena_bytes;
  int32_t router_pid;
  std::atomic<int32_t> host_pid;
  std::atomic<uint32_t> host_state;       // HostState
  std::atomic<uint32_t> stop_requested;   // router asks the host to exit
  alignas(kCacheLine) std::atomic<uint64_t> heartbeat;  // host bumps it periodically
  char host_message[kHostMessage];        // why the host failed to start
  HostMetricsBlock host_metrics;          // host -> router, for /metrics
  ExecutorSlot executors[kMaxExecutors];  // host -> router, for the watchdog
  RingControl requests;
  RingControl completions;
};
static_assert(std::is_standard_layout_v<ChannelHeader>);

}  // namespace es::ipc
