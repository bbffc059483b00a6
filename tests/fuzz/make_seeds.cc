// make_seeds OUT_DIR: writes the binary seed files of tests/fuzz/corpus
// (checked in; rerun only when a layout changes, e.g. after a bump of
// ipc::kLayoutVersion):
//   OUT_DIR/channel_attach/    real segments from Channel::Create
//   OUT_DIR/completion_check/  reservations with good and bad completions
//   OUT_DIR/npy/               small .npy files, v1 and v2, several dtypes
// The text seeds (YAML, request text protos) are written by hand.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/datatype.h"
#include "ipc/channel.h"

namespace {

void Write(const std::filesystem::path& path, const std::string& bytes) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string Segment(uint64_t arena_bytes, uint32_t slots) {
  es::ipc::ChannelOptions options;
  options.arena_bytes = arena_bytes;
  options.request_slots = slots;
  options.completion_slots = slots;
  auto channel = es::ipc::Channel::Create(options);
  if (!channel.ok()) {
    std::fprintf(stderr, "Create: %s\n", channel.status().ToString().c_str());
    std::exit(1);
  }
  const auto size = static_cast<size_t>(lseek(channel->fd(), 0, SEEK_END));
  std::string bytes(size, '\0');
  if (pread(channel->fd(), bytes.data(), size, 0) != static_cast<ssize_t>(size)) {
    std::perror("pread");
    std::exit(1);
  }
  return bytes;
}

template <typename T>
void Append(std::string* out, const T& value) {
  out->append(reinterpret_cast<const char*>(&value), sizeof(value));
}

// A completion_check input: reservation, then the completion (its used bytes).
std::string CompletionInput(uint64_t offset, uint64_t capacity, const std::vector<es::DataType>& types,
                            const es::ipc::CompletionDesc& c) {
  std::string out;
  Append(&out, offset);
  Append(&out, capacity);
  out += static_cast<char>(types.size());
  for (es::DataType t : types) out += static_cast<char>(static_cast<uint32_t>(t) - 1);
  out.append(reinterpret_cast<const char*>(&c), es::ipc::UsedBytes(c));
  return out;
}

es::ipc::TensorDesc Tensor(uint64_t offset, es::DataType type, std::vector<int64_t> dims) {
  es::ipc::TensorDesc t{};
  t.offset = offset;
  t.datatype = static_cast<uint32_t>(type);
  t.ndim = static_cast<uint32_t>(dims.size());
  uint64_t bytes = es::DataTypeSize(type);
  for (size_t i = 0; i < dims.size(); ++i) {
    t.dims[i] = dims[i];
    bytes *= static_cast<uint64_t>(dims[i]);
  }
  t.bytes = bytes;
  return t;
}

std::string Npy(int major, const std::string& descr, const std::string& shape, size_t data_bytes) {
  std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  const size_t prefix = major == 1 ? 10 : 12;
  while ((prefix + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string out = "\x93NUMPY";
  out += static_cast<char>(major);
  out += '\0';
  const size_t len = header.size();
  out += static_cast<char>(len & 0xff);
  out += static_cast<char>((len >> 8) & 0xff);
  if (major != 1) out += std::string(2, '\0');
  out += header;
  for (size_t i = 0; i < data_bytes; ++i) out += static_cast<char>(i % 7 == 0 ? 0x3f : i % 5);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  const std::filesystem::path out = argv[1];
  using es::DataType;

  Write(out / "channel_attach" / "no_arena", Segment(0, 1));
  Write(out / "channel_attach" / "arena_4k", Segment(4096, 1));
  Write(out / "channel_attach" / "two_slots", Segment(64, 2));

  es::ipc::CompletionDesc ok{};
  ok.request_id = 7;
  ok.num_outputs = 2;
  ok.compute_ns = 1000;
  ok.outputs[0] = Tensor(4096, DataType::kFp32, {2, 10});
  ok.outputs[1] = Tensor(4096 + 80, DataType::kInt64, {2});
  Write(out / "completion_check" / "two_outputs_ok",
        CompletionInput(4096, 256, {DataType::kFp32, DataType::kInt64}, ok));
  es::ipc::CompletionDesc one{};
  one.request_id = 9;
  one.num_outputs = 1;
  one.outputs[0] = Tensor(1 << 20, DataType::kUint8, {3, 1, 5});
  Write(out / "completion_check" / "one_output_ok", CompletionInput(1 << 20, 15, {DataType::kUint8}, one));
  es::ipc::CompletionDesc past = ok;
  past.outputs[1].offset = 4096 + 250;  // runs past the reservation
  Write(out / "completion_check" / "past_region",
        CompletionInput(4096, 256, {DataType::kFp32, DataType::kInt64}, past));
  es::ipc::CompletionDesc error{};
  error.request_id = 3;
  error.status_code = 3;
  std::strcpy(error.message, "input 'x': bad shape");
  Write(out / "completion_check" / "error_completion", CompletionInput(0, 64, {DataType::kFp64}, error));

  Write(out / "npy" / "f4_2x3.npy", Npy(1, "<f4", "(2, 3)", 24));
  Write(out / "npy" / "i8_vector.npy", Npy(1, "<i8", "(3,)", 24));
  Write(out / "npy" / "u1_scalar.npy", Npy(1, "|u1", "()", 1));
  Write(out / "npy" / "b1_v2.npy", Npy(2, "|b1", "(4, 1)", 4));
  Write(out / "npy" / "f8_v3_empty.npy", Npy(3, "<f8", "(0, 5)", 0));
  return 0;
}
