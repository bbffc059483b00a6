// CheckCompletion: every way a host's completion can lie is refused before
// the router reads a byte of the arena for it; honest completions pass.
#include "server/hosts/completion_check.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace es {
namespace {

// The declared outputs a Reservation views (they outlive every check here).
const std::vector<DataType> kFp32{DataType::kFp32};
const std::vector<DataType> kFp32AndInt64{DataType::kFp32, DataType::kInt64};
const std::vector<std::vector<int64_t>> kAnyRowsOf8{{-1, 8}};

// A request whose output region is [4096, 4096 + 1024): one FP32 output.
Reservation OneFp32Output() { return Reservation{4096, 1024, kFp32, {}}; }

// An honest answer: FP32 [2, 8] (64 bytes) at the region's start.
ipc::CompletionDesc Honest() {
  ipc::CompletionDesc c{};
  c.request_id = 7;
  c.status_code = 0;
  c.num_outputs = 1;
  ipc::TensorDesc& t = c.outputs[0];
  t.offset = 4096;
  t.bytes = 64;
  t.datatype = static_cast<uint32_t>(DataType::kFp32);
  t.ndim = 2;
  t.dims[0] = 2;
  t.dims[1] = 8;
  return c;
}

void ExpectRejected(const ipc::CompletionDesc& c, const std::string& needle) {
  const Status s = CheckCompletion(c, OneFp32Output());
  EXPECT_EQ(s.code(), StatusCode::kInternal) << s.ToString();
  EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
}

TEST(CompletionCheckTest, HonestCompletionsPass) {
  EXPECT_TRUE(CheckCompletion(Honest(), OneFp32Output()).ok());
  ipc::CompletionDesc end = Honest();
  end.outputs[0].offset = 4096 + 1024 - 64;  // flush with the region's end
  EXPECT_TRUE(CheckCompletion(end, OneFp32Output()).ok());
  ipc::CompletionDesc empty = Honest();
  empty.outputs[0].dims[0] = 0;
  empty.outputs[0].bytes = 0;
  EXPECT_TRUE(CheckCompletion(empty, OneFp32Output()).ok());
}

TEST(CompletionCheckTest, ErrorCompletionsPassOnlyWithAKnownCode) {
  ipc::CompletionDesc c{};
  c.status_code = static_cast<uint32_t>(StatusCode::kInternal);
  c.num_outputs = 999;  // ignored on an error
  EXPECT_TRUE(CheckCompletion(c, OneFp32Output()).ok());
  c.status_code = 17;
  ExpectRejected(c, "status code 17");
  c.status_code = UINT32_MAX;
  ExpectRejected(c, "status code");
}

TEST(CompletionCheckTest, OutputsOutsideTheRequestsRegionAreRejected) {
  ipc::CompletionDesc c = Honest();
  c.outputs[0].offset = 4096 - 64;  // the neighbour's bytes just before
  ExpectRejected(c, "outside the request's output region");
  c.outputs[0].offset = 4096 + 1024 - 32;  // straddles the end
  ExpectRejected(c, "outside");
  c.outputs[0].offset = UINT64_MAX - 10;  // offset + bytes wraps
  ExpectRejected(c, "outside");
  c.outputs[0].offset = 0;  // another request's region
  ExpectRejected(c, "outside");
}

TEST(CompletionCheckTest, BytesMustBeExactlyTheShapesSize) {
  ipc::CompletionDesc c = Honest();
  c.outputs[0].bytes = 68;
  ExpectRejected(c, "68 bytes for a shape of 64");
  c = Honest();
  c.outputs[0].bytes = uint64_t{1} << 62;
  ExpectRejected(c, "bytes");
  // Dims whose byte size wraps to exactly the bytes given: 2^62 * 4 * 4 = 2^66 -> 0.
  c = Honest();
  c.outputs[0].dims[0] = int64_t{1} << 62;
  c.outputs[0].dims[1] = 4;
  c.outputs[0].bytes = 0;
  ExpectRejected(c, "overflows");
  c = Honest();
  c.outputs[0].dims[1] = -8;
  c.outputs[0].dims[0] = -2;  // a product of two negatives is positive: still refused
  ExpectRejected(c, "negative");
}

// An empty output (no bytes) whose other dims are huge is refused: the
// router sizes what it builds from an output's rows (an ensemble's
// uncertainty outputs, a packed member's split), and [2^62 + 1, 0] rows
// would overrun its buffers or loop for ever. Empty outputs whose dims fit
// the region still pass.
TEST(CompletionCheckTest, EmptyOutputsMustHaveDimsTheRegionCouldHold) {
  for (const std::vector<int64_t>& dims : std::vector<std::vector<int64_t>>{
           {(int64_t{1} << 62) + 1, 0}, {0, int64_t{1} << 40}, {257, 0}, {3, int64_t{1} << 62, 0}}) {
    ipc::CompletionDesc c = Honest();
    c.outputs[0].dims[0] = dims[0];
    c.outputs[0].dims[1] = dims[1];
    if (dims.size() == 3) {
      c.outputs[0].ndim = 3;
      c.outputs[0].dims[2] = dims[2];
    }
    c.outputs[0].bytes = 0;
    ExpectRejected(c, "zero dims taken as 1");
  }
  ipc::CompletionDesc fits = Honest();
  fits.outputs[0].dims[0] = 256;  // 256 rows of 4 bytes: the region's 1024
  fits.outputs[0].dims[1] = 0;
  fits.outputs[0].bytes = 0;
  EXPECT_TRUE(CheckCompletion(fits, OneFp32Output()).ok());
}

TEST(CompletionCheckTest, DatatypeRankAndCountMustBeTheDeclaredOnes) {
  ipc::CompletionDesc c = Honest();
  c.outputs[0].datatype = static_cast<uint32_t>(DataType::kFp64);
  ExpectRejected(c, "not the declared FP32");
  c.outputs[0].datatype = 0xdeadbeef;
  ExpectRejected(c, "datatype");
  c = Honest();
  c.outputs[0].ndim = ipc::kMaxDims + 1;
  ExpectRejected(c, "rank");
  c.outputs[0].ndim = UINT32_MAX;
  ExpectRejected(c, "rank");
  c = Honest();
  c.num_outputs = 2;
  ExpectRejected(c, "2 output(s), the model declares 1");
  c.num_outputs = 0;
  ExpectRejected(c, "0 output(s)");
  c.num_outputs = UINT32_MAX;
  ExpectRejected(c, "output(s)");
}

// With the declared shapes given, rank and fixed dims must match them (the
// host checks its model's outputs against the config, so only a lying host
// sends anything else); -1 accepts any size.
TEST(CompletionCheckTest, RankAndFixedDimsMustBeTheDeclaredOnes) {
  Reservation declared = OneFp32Output();
  declared.output_dims = kAnyRowsOf8;
  EXPECT_TRUE(CheckCompletion(Honest(), declared).ok());
  ipc::CompletionDesc c = Honest();
  c.outputs[0].ndim = 3;  // [2, 8, 1]: same bytes, another rank
  c.outputs[0].dims[2] = 1;
  Status s = CheckCompletion(c, declared);
  EXPECT_NE(s.message().find("rank 3, the model declares 2"), std::string::npos) << s.ToString();
  c = Honest();
  c.outputs[0].dims[0] = 4;  // [4, 4]: same bytes, another fixed dim
  c.outputs[0].dims[1] = 4;
  s = CheckCompletion(c, declared);
  EXPECT_NE(s.message().find("dim 1 is 4, the model declares 8"), std::string::npos) << s.ToString();
}

TEST(CompletionCheckTest, EveryOutputIsChecked) {
  Reservation two{0, 4096, kFp32AndInt64, {}};
  ipc::CompletionDesc c = Honest();
  c.outputs[0].offset = 0;
  c.num_outputs = 2;
  ipc::TensorDesc& second = c.outputs[1];
  second.offset = 128;
  second.datatype = static_cast<uint32_t>(DataType::kInt64);
  second.ndim = 1;
  second.dims[0] = 3;
  second.bytes = 24;
  EXPECT_TRUE(CheckCompletion(c, two).ok());
  second.offset = 4096 - 8;
  const Status s = CheckCompletion(c, two);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("output 1"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace es
