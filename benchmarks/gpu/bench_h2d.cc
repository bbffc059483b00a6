// bench-h2d: how tensors best cross between the shared-memory arena and the
// GPU. Three ways, each host-to-device (inputs) and device-to-host (outputs),
// on one CUDA stream, at sizes from 4 KiB to 64 MiB:
//
//   pageable    cudaMemcpyAsync straight from/to the arena as mapped (the
//               driver stages through its own pinned buffers, synchronously)
//   staging     memcpy into/out of a pinned buffer (cudaHostAlloc) plus an
//               async copy from/to it: one extra host copy
//   registered  the arena registered once with cudaHostRegister, then async
//               copies straight from/to it: what a CUDA host does
//
// The arena is a real ipc::Channel's (a MAP_SHARED memfd mapping, as the
// router and host share it). Prints a table of median µs and GB/s, the cost of
// registering, and optionally a CSV. Exit 0 done, 2 usage, 77 no CUDA device
// (nothing measured: the ctest/automake "skipped" code), 1 a CUDA error.
//
//   bench-h2d [--device 0] [--max-mb 64] [--csv FILE]
#include <cuda_runtime_api.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "ipc/channel.h"
#include "model_host/cuda/cuda_check.h"
#include "model_host/cuda/host_registration.h"
#include "model_host/cuda/pinned_buffer.h"
#include "common/command_line.h"

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kExitNoDevice = 77;
constexpr size_t kSmallest = 4 << 10;
constexpr size_t kBytesPerSize = 256ULL << 20;  // iterations = this / size, clamped
constexpr int kMinIterations = 10;
constexpr int kMaxIterations = 200;

struct Row {
  std::string direction;  // "h2d" or "d2h"
  std::string mode;       // "pageable", "staging", "registered"
  size_t bytes = 0;
  double median_us = 0;
  double p90_us = 0;
};

// A failed CUDA call ends the run with its message (exit 1).
void Check(cudaError_t error, const char* what) {
  const es::Status status = es::cuda::CheckCuda(error, what);
  if (!status.ok()) {
    std::fprintf(stderr, "bench-h2d: %s\n", status.message().c_str());
    std::exit(1);
  }
}

// Median and p90 of `iterations` timed calls of `copy` (after 3 untimed).
Row Measure(const std::string& direction, const std::string& mode, size_t bytes,
            const std::function<void()>& copy) {
  const int iterations =
      static_cast<int>(std::clamp<size_t>(kBytesPerSize / bytes, kMinIterations, kMaxIterations));
  for (int i = 0; i < 3; ++i) copy();
  std::vector<double> us;
  us.reserve(static_cast<size_t>(iterations));
  for (int i = 0; i < iterations; ++i) {
    const auto start = Clock::now();
    copy();
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
  }
  std::sort(us.begin(), us.end());
  return {direction, mode, bytes, us[us.size() / 2], us[us.size() * 9 / 10]};
}

std::string SizeLabel(size_t bytes) {
  if (bytes >= (1 << 20)) return std::to_string(bytes >> 20) + " MiB";
  return std::to_string(bytes >> 10) + " KiB";
}

double Gbps(const Row& row) { return static_cast<double>(row.bytes) / (row.median_us * 1e3); }

const Row* Find(const std::vector<Row>& rows, const std::string& direction, const std::string& mode,
                size_t bytes) {
  for (const Row& r : rows) {
    if (r.direction == direction && r.mode == mode && r.bytes == bytes) return &r;
  }
  return nullptr;
}

void PrintTable(const std::vector<Row>& rows, const std::vector<size_t>& sizes) {
  const char* modes[] = {"pageable", "staging", "registered"};
  for (const char* direction : {"h2d", "d2h"}) {
    std::printf("\n%s (median µs per copy, GB/s in brackets)\n", direction);
    std::printf("%10s %20s %20s %20s\n", "size", modes[0], modes[1], modes[2]);
    for (size_t bytes : sizes) {
      std::printf("%10s", SizeLabel(bytes).c_str());
      for (const char* mode : modes) {
        const Row* r = Find(rows, direction, mode, bytes);
        char cell[64];
        std::snprintf(cell, sizeof(cell), "%.1f (%.1f)", r ? r->median_us : 0.0, r ? Gbps(*r) : 0.0);
        std::printf(" %20s", cell);
      }
      std::printf("\n");
    }
  }
}

void WriteCsv(const std::string& path, const std::vector<Row>& rows, size_t arena_bytes,
              double register_ms) {
  std::ofstream out(path);
  out << "direction,mode,bytes,median_us,p90_us,gb_per_s\n";
  for (const Row& r : rows) {
    out << r.direction << "," << r.mode << "," << r.bytes << "," << r.median_us << "," << r.p90_us
        << "," << Gbps(r) << "\n";
  }
  out << "register,registered," << arena_bytes << "," << register_ms * 1e3 << ",,\n";  // one cudaHostRegister
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench-h2d: arena <-> GPU copies: pageable, pinned staging, registered arena"};
  int device = 0;
  size_t max_mb = 64;
  std::string csv;
  app.add_option("--device", device, "CUDA device index (default 0)")->check(CLI::Range(0, 64));
  app.add_option("--max-mb", max_mb, "largest copy in MiB, sizes go x4 from 4 KiB (default 64)")
      ->check(CLI::Range(1, 1024));
  app.add_option("--csv", csv, "also write the rows to this CSV file");
  if (std::optional<int> exit_code = es::ParseCommandLine(app, argc, argv, "bench-h2d")) {
    return *exit_code;
  }

  std::string why;
  const int devices = es::cuda::VisibleDeviceCount(&why);
  if (devices == 0) {
    std::printf("bench-h2d: no CUDA device (%s): nothing measured\n", why.c_str());
    return kExitNoDevice;
  }
  if (device >= devices) {
    std::fprintf(stderr, "bench-h2d: --device %d, but only %d visible\n", device, devices);
    return 2;
  }
  const size_t largest = max_mb << 20;
  std::vector<size_t> sizes;
  for (size_t s = kSmallest; s <= largest; s *= 4) sizes.push_back(s);

  Check(cudaSetDevice(device), "cudaSetDevice");
  cudaDeviceProp prop{};
  Check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  cudaStream_t stream = nullptr;
  Check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  void* gpu = nullptr;
  Check(cudaMalloc(&gpu, largest), "cudaMalloc");

  // Inputs in the arena's first half, outputs in its second, as the router lays them.
  es::ipc::ChannelOptions options;
  options.arena_bytes = 2 * largest;
  auto channel = es::ipc::Channel::Create(options);
  if (!channel.ok()) {
    std::fprintf(stderr, "bench-h2d: %s\n", channel.status().message().c_str());
    return 1;
  }
  uint8_t* in = channel->arena();
  uint8_t* out = channel->arena() + largest;
  std::memset(channel->arena(), 1, channel->arena_bytes());  // fault every page in first
  auto staging = es::cuda::PinnedBuffer::Allocate(largest);
  if (!staging.ok()) {
    std::fprintf(stderr, "bench-h2d: %s\n", staging.status().message().c_str());
    return 1;
  }
  void* pinned = staging->data();
  auto sync = [&] { Check(cudaStreamSynchronize(stream), "cudaStreamSynchronize"); };

  std::vector<Row> rows;
  for (size_t bytes : sizes) {
    rows.push_back(Measure("h2d", "pageable", bytes, [&] {
      Check(cudaMemcpyAsync(gpu, in, bytes, cudaMemcpyHostToDevice, stream), "h2d");
      sync();
    }));
    rows.push_back(Measure("h2d", "staging", bytes, [&] {
      std::memcpy(pinned, in, bytes);
      Check(cudaMemcpyAsync(gpu, pinned, bytes, cudaMemcpyHostToDevice, stream), "h2d");
      sync();
    }));
    rows.push_back(Measure("d2h", "pageable", bytes, [&] {
      Check(cudaMemcpyAsync(out, gpu, bytes, cudaMemcpyDeviceToHost, stream), "d2h");
      sync();
    }));
    rows.push_back(Measure("d2h", "staging", bytes, [&] {
      Check(cudaMemcpyAsync(pinned, gpu, bytes, cudaMemcpyDeviceToHost, stream), "d2h");
      sync();
      std::memcpy(out, pinned, bytes);
    }));
  }

  const auto register_start = Clock::now();
  auto registration = es::cuda::HostRegistration::Register(channel->arena(), channel->arena_bytes());
  const double register_ms =
      std::chrono::duration<double, std::milli>(Clock::now() - register_start).count();
  if (!registration.ok()) {
    std::fprintf(stderr, "bench-h2d: %s\n", registration.status().message().c_str());
    return 1;
  }
  for (size_t bytes : sizes) {
    rows.push_back(Measure("h2d", "registered", bytes, [&] {
      Check(cudaMemcpyAsync(gpu, in, bytes, cudaMemcpyHostToDevice, stream), "h2d");
      sync();
    }));
    rows.push_back(Measure("d2h", "registered", bytes, [&] {
      Check(cudaMemcpyAsync(out, gpu, bytes, cudaMemcpyDeviceToHost, stream), "d2h");
      sync();
    }));
  }

  std::printf("bench-h2d: device %d (%s), arena %zu MiB (memfd, MAP_SHARED), one stream\n", device,
              prop.name, channel->arena_bytes() >> 20);
  std::printf("registering the arena (cudaHostRegister, %zu MiB): %.1f ms, once per host\n",
              channel->arena_bytes() >> 20, register_ms);
  PrintTable(rows, sizes);
  if (!csv.empty()) WriteCsv(csv, rows, channel->arena_bytes(), register_ms);
  cudaFree(gpu);
  cudaStreamDestroy(stream);
  return 0;
}
