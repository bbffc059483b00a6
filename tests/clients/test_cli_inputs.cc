// Unit tests of ensemble-cli's input sources (no server): .npy round trip,
// nested and flat JSON, raw files, random data, and their errors.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

#include "clients/cli/input_source.h"
#include "tests/common/temp_dir.h"

namespace es::cli {
namespace {

const std::vector<int64_t> kImage = {-1, 1, 2, 2};  // a small "image" input: batch x 1 x 2 x 2

std::vector<float> Floats(const Tensor& t) {
  std::vector<float> v(t.bytes.size() / 4);
  std::memcpy(v.data(), t.bytes.data(), t.bytes.size());
  return v;
}

TEST(CliInputs, NpyRoundTripAndBatchDim) {
  es::testing::TempDir dir;
  std::string error;
  const std::vector<float> values{1, 2, 3, 4, 5, 6, 7, 8};
  const std::string path = dir.Path("x.npy");
  ASSERT_TRUE(WriteNpyFloat32(path, {2, 1, 2, 2}, values, &error)) << error;
  auto a = ReadNpy(path, &error);
  ASSERT_TRUE(a.has_value()) << error;
  EXPECT_EQ(a->descr, "<f4");
  EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 1, 2, 2}));
  std::mt19937 rng(0);
  auto t = LoadInput(path, "FP32", kImage, 1, rng, &error);
  ASSERT_TRUE(t.has_value()) << error;
  EXPECT_EQ(t->shape, (std::vector<int64_t>{2, 1, 2, 2}));
  EXPECT_EQ(Floats(*t), values);

  // One dim fewer than the model's: a batch of one.
  const std::string single = dir.Path("one.npy");
  ASSERT_TRUE(WriteNpyFloat32(single, {1, 2, 2}, {1, 2, 3, 4}, &error)) << error;
  t = LoadInput(single, "FP32", kImage, 1, rng, &error);
  ASSERT_TRUE(t.has_value()) << error;
  EXPECT_EQ(t->shape, (std::vector<int64_t>{1, 1, 2, 2}));
  // Converted to the model's datatype.
  t = LoadInput(single, "FP64", kImage, 1, rng, &error);
  ASSERT_TRUE(t.has_value()) << error;
  EXPECT_EQ(t->bytes.size(), 32u);
  EXPECT_DOUBLE_EQ(ElementAsDouble("FP64", t->bytes, 3), 4.0);

  // A shape that does not fit, a missing file, a file that is not .npy.
  const std::string wrong = dir.Path("wrong.npy");
  ASSERT_TRUE(WriteNpyFloat32(wrong, {2, 3}, {1, 2, 3, 4, 5, 6}, &error));
  EXPECT_FALSE(LoadInput(wrong, "FP32", kImage, 1, rng, &error).has_value());
  EXPECT_NE(error.find("does not fit"), std::string::npos) << error;
  EXPECT_FALSE(LoadInput(dir.Path("missing.npy"), "FP32", kImage, 1, rng, &error).has_value());
  EXPECT_NE(error.find("missing.npy"), std::string::npos) << error;
  dir.Write("bad.npy", "hello");
  EXPECT_FALSE(LoadInput(dir.Path("bad.npy"), "FP32", kImage, 1, rng, &error).has_value());
  EXPECT_NE(error.find("NUMPY"), std::string::npos) << error;
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
  std::string error;
  ASSERT_TRUE(ParseNpy(NpyBytes("(2, 3)", 24), "ok.npy", &error).has_value()) << error;
  for (const std::string shape : {"(2, x)", "(-1, -1)", "(2, 9223372036854775807)", "(4294967296, 4294967296)"}) {
    error.clear();
    EXPECT_FALSE(ParseNpy(NpyBytes(shape, 16), "bad.npy", &error).has_value()) << shape;
    EXPECT_NE(error.find("bad.npy"), std::string::npos) << shape << ": " << error;
  }
}

TEST(CliInputs, JsonNestedAndFlat) {
  std::string error;
  std::mt19937 rng(0);
  auto nested = LoadInput("json:[[[1, 2], [3, 4]]]", "FP32", kImage, 1, rng, &error);
  ASSERT_TRUE(nested.has_value()) << error;
  EXPECT_EQ(nested->shape, (std::vector<int64_t>{1, 1, 2, 2}));
  EXPECT_EQ(Floats(*nested), (std::vector<float>{1, 2, 3, 4}));
  auto flat = LoadInput("json:[1, 2, 3, 4, 5, 6, 7, 8]", "FP32", kImage, 1, rng, &error);
  ASSERT_TRUE(flat.has_value()) << error;
  EXPECT_EQ(flat->shape, (std::vector<int64_t>{2, 1, 2, 2})) << "the batch dim from the count";
  auto ints = LoadInput("json:[1, 2, 3]", "INT64", {-1, 3}, 1, rng, &error);
  ASSERT_TRUE(ints.has_value()) << error;
  EXPECT_EQ(ints->bytes.size(), 24u);

  EXPECT_FALSE(LoadInput("json:[1, 2, 3]", "FP32", kImage, 1, rng, &error).has_value());
  EXPECT_NE(error.find("whole number"), std::string::npos) << error;
  EXPECT_FALSE(LoadInput("json:[[1, 2], [3]]", "FP32", {-1, 2}, 1, rng, &error).has_value());
  EXPECT_NE(error.find("ragged"), std::string::npos) << error;
  EXPECT_FALSE(LoadInput("json:[1, \"a\"]", "FP32", {-1, 2}, 1, rng, &error).has_value());
  EXPECT_FALSE(LoadInput("json:[1,", "FP32", {-1, 2}, 1, rng, &error).has_value());
  EXPECT_FALSE(LoadInput("something", "FP32", {-1, 2}, 1, rng, &error).has_value());
  EXPECT_NE(error.find("expected random"), std::string::npos) << error;
}

TEST(CliInputs, RawAndRandom) {
  es::testing::TempDir dir;
  std::string error;
  std::mt19937 rng(0);
  const std::vector<float> values{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  const std::string path =
      dir.Write("x.raw", std::string(reinterpret_cast<const char*>(values.data()), values.size() * 4));
  auto raw = LoadInput("raw:" + path, "FP32", kImage, 1, rng, &error);
  ASSERT_TRUE(raw.has_value()) << error;
  EXPECT_EQ(raw->shape, (std::vector<int64_t>{3, 1, 2, 2}));
  EXPECT_EQ(Floats(*raw), values);
  dir.Write("odd.raw", "12345");
  EXPECT_FALSE(LoadInput("raw:" + dir.Path("odd.raw"), "FP32", kImage, 1, rng, &error).has_value());

  auto random = LoadInput("random", "FP32", kImage, 5, rng, &error);
  ASSERT_TRUE(random.has_value()) << error;
  EXPECT_EQ(random->shape, (std::vector<int64_t>{5, 1, 2, 2}));
  for (float v : Floats(*random)) {
    EXPECT_GE(v, 0.f);
    EXPECT_LT(v, 1.f);
  }
  EXPECT_FALSE(LoadInput("random", "FP32", {-1, -1}, 1, rng, &error).has_value()) << "a variable non-batch dim";
  EXPECT_FALSE(LoadInput("random", "BYTES", {-1}, 1, rng, &error).has_value());
}

}  // namespace
}  // namespace es::cli
