// Unit tests of ensemble-cli's input sources (no server): .npy round trip,
// nested and flat JSON, raw files, random data, and their errors.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

#include "clients/cli/input_source.h"
#include "clients/tensor.h"
#include "tests/common/temp_dir.h"

namespace es::cli {
namespace {

const std::vector<int64_t> kImage = {-1, 1, 2, 2};  // a small "image" input: batch x 1 x 2 x 2

std::vector<float> Floats(const Tensor& t) {
  std::vector<float> v(t.bytes.size() / 4);
  std::memcpy(v.data(), t.bytes.data(), t.bytes.size());
  return v;
}

// The error of a load that must fail (its message, for the checks that follow).
std::string ErrorOf(const es::StatusOr<Tensor>& loaded) {
  EXPECT_FALSE(loaded.ok()) << "loaded a tensor of shape " << es::client::ShapeText(loaded->shape);
  return loaded.ok() ? "" : loaded.status().message();
}

TEST(CliInputs, NpyRoundTripAndBatchDim) {
  es::testing::TempDir dir;
  const std::vector<float> values{1, 2, 3, 4, 5, 6, 7, 8};
  const std::string path = dir.Path("x.npy");
  const es::Status written = WriteNpyFloat32(path, {2, 1, 2, 2}, values);
  ASSERT_TRUE(written.ok()) << written.ToString();
  auto a = ReadNpy(path);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->descr, "<f4");
  EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 1, 2, 2}));
  std::mt19937 rng(0);
  auto t = LoadInput(path, "FP32", kImage, 1, rng);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->shape, (std::vector<int64_t>{2, 1, 2, 2}));
  EXPECT_EQ(Floats(*t), values);

  // One dim fewer than the model's: a batch of one.
  const std::string single = dir.Path("one.npy");
  ASSERT_TRUE(WriteNpyFloat32(single, {1, 2, 2}, {1, 2, 3, 4}).ok());
  t = LoadInput(single, "FP32", kImage, 1, rng);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->shape, (std::vector<int64_t>{1, 1, 2, 2}));
  // Converted to the model's datatype.
  t = LoadInput(single, "FP64", kImage, 1, rng);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->bytes.size(), 32u);
  EXPECT_DOUBLE_EQ(ElementAsDouble("FP64", t->bytes, 3), 4.0);

  // A shape that does not fit, a missing file, a file that is not .npy:
  // each its own code, the message naming the file.
  const std::string wrong = dir.Path("wrong.npy");
  ASSERT_TRUE(WriteNpyFloat32(wrong, {2, 3}, {1, 2, 3, 4, 5, 6}).ok());
  auto loaded = LoadInput(wrong, "FP32", kImage, 1, rng);
  EXPECT_NE(ErrorOf(loaded).find("does not fit"), std::string::npos) << loaded.status().ToString();
  EXPECT_EQ(loaded.status().code(), es::StatusCode::kInvalidArgument);
  loaded = LoadInput(dir.Path("missing.npy"), "FP32", kImage, 1, rng);
  EXPECT_NE(ErrorOf(loaded).find("missing.npy"), std::string::npos) << loaded.status().ToString();
  EXPECT_EQ(loaded.status().code(), es::StatusCode::kNotFound);
  dir.Write("bad.npy", "hello");
  loaded = LoadInput(dir.Path("bad.npy"), "FP32", kImage, 1, rng);
  EXPECT_NE(ErrorOf(loaded).find("NUMPY"), std::string::npos) << loaded.status().ToString();
  // A file that cannot be written is an error, not a crash.
  EXPECT_FALSE(WriteNpyFloat32(dir.Path("no_such_dir/x.npy"), {1}, {1}).ok());
}

// A v1 .npy header for `shape_text` ("(2, 3)") of little-endian float32,
// padded as numpy pads it, followed by `data_bytes` zero bytes.
std::string NpyBytes(const std::string& shape_text, size_t data_bytes) {
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape_text + ", }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  return out + header + std::string(data_bytes, '\0');
}

// What the fuzzer found (tests/fuzz/npy_fuzzer.cc): a dimension that is not
// a number aborted ensemble-cli; negative dims and shapes whose size
// overflows were taken. Each is now a clear error.
TEST(CliInputs, NpyShapesThatAreNotSizesAreRefused) {
  const auto ok = ParseNpy(NpyBytes("(2, 3)", 24), "ok.npy");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  for (const std::string shape : {"(2, x)", "(-1, -1)", "(2, 9223372036854775807)", "(4294967296, 4294967296)"}) {
    const auto parsed = ParseNpy(NpyBytes(shape, 16), "bad.npy");
    ASSERT_FALSE(parsed.ok()) << shape;
    EXPECT_EQ(parsed.status().code(), es::StatusCode::kInvalidArgument) << shape;
    EXPECT_NE(parsed.status().message().find("bad.npy"), std::string::npos)
        << shape << ": " << parsed.status().ToString();
  }
}

TEST(CliInputs, JsonNestedAndFlat) {
  std::mt19937 rng(0);
  auto nested = LoadInput("json:[[[1, 2], [3, 4]]]", "FP32", kImage, 1, rng);
  ASSERT_TRUE(nested.ok()) << nested.status().ToString();
  EXPECT_EQ(nested->shape, (std::vector<int64_t>{1, 1, 2, 2}));
  EXPECT_EQ(Floats(*nested), (std::vector<float>{1, 2, 3, 4}));
  auto flat = LoadInput("json:[1, 2, 3, 4, 5, 6, 7, 8]", "FP32", kImage, 1, rng);
  ASSERT_TRUE(flat.ok()) << flat.status().ToString();
  EXPECT_EQ(flat->shape, (std::vector<int64_t>{2, 1, 2, 2})) << "the batch dim from the count";
  auto ints = LoadInput("json:[1, 2, 3]", "INT64", {-1, 3}, 1, rng);
  ASSERT_TRUE(ints.ok()) << ints.status().ToString();
  EXPECT_EQ(ints->bytes.size(), 24u);

  EXPECT_NE(ErrorOf(LoadInput("json:[1, 2, 3]", "FP32", kImage, 1, rng)).find("whole number"), std::string::npos);
  const std::string ragged = ErrorOf(LoadInput("json:[[1, 2], [3]]", "FP32", {-1, 2}, 1, rng));
  EXPECT_EQ(ragged.rfind("json input: ragged", 0), 0u) << ragged;
  EXPECT_NE(ErrorOf(LoadInput("json:[1, \"a\"]", "FP32", {-1, 2}, 1, rng)).find("not a number"), std::string::npos);
  EXPECT_FALSE(LoadInput("json:[1,", "FP32", {-1, 2}, 1, rng).ok());
  EXPECT_NE(ErrorOf(LoadInput("something", "FP32", {-1, 2}, 1, rng)).find("expected random"), std::string::npos);
}

TEST(CliInputs, RawAndRandom) {
  es::testing::TempDir dir;
  std::mt19937 rng(0);
  const std::vector<float> values{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  const std::string path =
      dir.Write("x.raw", std::string(reinterpret_cast<const char*>(values.data()), values.size() * 4));
  auto raw = LoadInput("raw:" + path, "FP32", kImage, 1, rng);
  ASSERT_TRUE(raw.ok()) << raw.status().ToString();
  EXPECT_EQ(raw->shape, (std::vector<int64_t>{3, 1, 2, 2}));
  EXPECT_EQ(Floats(*raw), values);
  dir.Write("odd.raw", "12345");
  EXPECT_NE(ErrorOf(LoadInput("raw:" + dir.Path("odd.raw"), "FP32", kImage, 1, rng)).find("not whole FP32"),
            std::string::npos);

  auto random = LoadInput("random", "FP32", kImage, 5, rng);
  ASSERT_TRUE(random.ok()) << random.status().ToString();
  EXPECT_EQ(random->shape, (std::vector<int64_t>{5, 1, 2, 2}));
  for (float v : Floats(*random)) {
    EXPECT_GE(v, 0.f);
    EXPECT_LT(v, 1.f);
  }
  EXPECT_NE(ErrorOf(LoadInput("random", "FP32", {-1, -1}, 1, rng)).find("variable dim besides the batch dim"),
            std::string::npos);
  EXPECT_NE(ErrorOf(LoadInput("random", "BYTES", {-1}, 1, rng)).find("not supported"), std::string::npos);
}

}  // namespace
}  // namespace es::cli
