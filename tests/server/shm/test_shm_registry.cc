// SharedMemoryRegistry (server/shm/shm_registry.h) on real POSIX shared-memory
// objects the test creates, and the request codec's shared-memory inputs and
// outputs (server/kserve/request_codec.h) on top of it.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "server/kserve/request_codec.h"
#include "server/shm/shm_registry.h"

namespace es {
namespace {

constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();

// A shared-memory object made by the test (as a client would), unlinked at
// the end. Bytes are written and read through a descriptor of the test's own.
class TestObject {
 public:
  explicit TestObject(size_t bytes) {
    static std::atomic<int> counter{0};
    key_ = "/es_test_shm_";
    key_ += std::to_string(::getpid());
    key_.push_back('_');
    key_ += std::to_string(counter.fetch_add(1));
    fd_ = ::shm_open(key_.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    EXPECT_GE(fd_, 0) << key_ << ": " << std::strerror(errno);
    EXPECT_EQ(::ftruncate(fd_, static_cast<off_t>(bytes)), 0);
    std::string pattern(bytes, '\0');
    for (size_t i = 0; i < bytes; ++i) pattern[i] = static_cast<char>(i * 7 + 3);
    Put(0, pattern);
  }
  ~TestObject() {
    ::close(fd_);
    ::shm_unlink(key_.c_str());
  }
  const std::string& key() const { return key_; }
  void Put(uint64_t offset, const std::string& bytes) {
    ASSERT_EQ(::pwrite(fd_, bytes.data(), bytes.size(), static_cast<off_t>(offset)),
              static_cast<ssize_t>(bytes.size()));
  }
  std::string Get(uint64_t offset, size_t bytes) const {
    std::string out(bytes, '\0');
    EXPECT_EQ(::pread(fd_, out.data(), bytes, static_cast<off_t>(offset)), static_cast<ssize_t>(bytes));
    return out;
  }
  void Truncate(size_t bytes) { ASSERT_EQ(::ftruncate(fd_, static_cast<off_t>(bytes)), 0); }
  static char Pattern(size_t i) { return static_cast<char>(i * 7 + 3); }

 private:
  std::string key_;
  int fd_ = -1;
};

bool Contains(const Status& s, const std::string& needle) { return s.message().find(needle) != std::string::npos; }

TEST(ShmRegistryTest, RegisterListReadUnregister) {
  TestObject object(4096);
  SharedMemoryRegistry registry;
  ASSERT_TRUE(registry.Register("in", object.key(), 100, 1000).ok());
  ASSERT_TRUE(registry.Register("out", object.key(), 2000, 96).ok());

  auto all = registry.List();
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].name, "in");
  EXPECT_EQ((*all)[0].key, object.key());
  EXPECT_EQ((*all)[0].offset, 100u);
  EXPECT_EQ((*all)[0].byte_size, 1000u);
  auto one = registry.List("out");
  ASSERT_TRUE(one.ok());
  ASSERT_EQ(one->size(), 1u);
  EXPECT_EQ((*one)[0].offset, 2000u);
  EXPECT_EQ(registry.List("nope").status().code(), StatusCode::kNotFound);

  // Offsets are the region's: byte 10 of "in" is byte 110 of the object.
  auto bytes = registry.Read("in", 10, 5);
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  EXPECT_EQ(*bytes, object.Get(110, 5));
  EXPECT_EQ((*bytes)[0], TestObject::Pattern(110));

  Status again = registry.Register("in", object.key(), 0, 10);
  EXPECT_EQ(again.code(), StatusCode::kAlreadyExists);
  EXPECT_TRUE(Contains(again, "'in'"));

  EXPECT_TRUE(registry.Unregister("in").ok());
  EXPECT_EQ(registry.Unregister("in").code(), StatusCode::kNotFound);
  EXPECT_EQ(registry.Read("in", 0, 1).status().code(), StatusCode::kNotFound);
  registry.UnregisterAll();
  EXPECT_TRUE(registry.List()->empty());
}

TEST(ShmRegistryTest, RegistrationIsCheckedAgainstTheObject) {
  TestObject object(4096);
  SharedMemoryRegistry registry;
  Status past_end = registry.Register("r", object.key(), 4000, 97);
  EXPECT_EQ(past_end.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(past_end, "4096 bytes")) << past_end.message();
  EXPECT_TRUE(registry.Register("r", object.key(), 4000, 96).ok());  // exactly to the end
  // offset + byte_size wraps 64 bits: must not pass as small.
  EXPECT_EQ(registry.Register("w", object.key(), kMax - 5, 10).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.Register("w", object.key(), 10, kMax).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.Register("w", object.key(), 0, 0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.Register("", object.key(), 0, 10).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.Register("missing", "/es_test_shm_no_such_object", 0, 10).code(), StatusCode::kNotFound);
  for (const std::string& key : {std::string(""), std::string("/"), std::string("/a/b"), std::string(".."),
                                 std::string("/.."), std::string("/x\0y", 4), "/" + std::string(300, 'k')}) {
    Status s = registry.Register("bad", key, 0, 10);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << "key '" << key << "': " << s.ToString();
  }
  EXPECT_EQ(registry.List()->size(), 1u);
}

// A symbolic link in the shared-memory filesystem would let a client point a
// region at another of the server's files (and have outputs written there).
TEST(ShmRegistryTest, SymbolicLinksAndDirectoriesAreRefused) {
  TestObject target(64);
  const std::string link = "es_test_shm_link_" + std::to_string(::getpid());
  ASSERT_EQ(::symlink(("/dev/shm" + target.key()).c_str(), ("/dev/shm/" + link).c_str()), 0) << std::strerror(errno);
  SharedMemoryRegistry registry;
  Status s = registry.Register("l", "/" + link, 0, 10);
  ::unlink(("/dev/shm/" + link).c_str());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_TRUE(Contains(s, "symbolic link")) << s.message();

  const std::string dir = "es_test_shm_dir_" + std::to_string(::getpid());
  ASSERT_EQ(::mkdir(("/dev/shm/" + dir).c_str(), 0700), 0);
  Status d = registry.Register("d", "/" + dir, 0, 10);
  ::rmdir(("/dev/shm/" + dir).c_str());
  EXPECT_EQ(d.code(), StatusCode::kInvalidArgument) << d.ToString();
  EXPECT_TRUE(registry.List()->empty());
}

TEST(ShmRegistryTest, ReadsAreBoundsChecked) {
  TestObject object(1024);
  SharedMemoryRegistry registry;
  ASSERT_TRUE(registry.Register("r", object.key(), 24, 1000).ok());
  EXPECT_TRUE(registry.Read("r", 0, 1000).ok());
  EXPECT_TRUE(registry.Read("r", 1000, 0).ok());
  Status past = registry.Read("r", 990, 11).status();
  EXPECT_EQ(past.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(past, "'r'") && Contains(past, "990") && Contains(past, "1000 bytes")) << past.message();
  // Wrapping sums, and a huge size that must be refused before any buffer
  // of that size is made.
  EXPECT_EQ(registry.Read("r", kMax, 2).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.Read("r", 2, kMax).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.Read("r", 1001, 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.Open("r", 1, 1000).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.Open("r", kMax, 1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.Open("nope", 0, 1).status().code(), StatusCode::kNotFound);
}

TEST(ShmRegistryTest, WritesGoToTheOpenedPlaceAndFitItsCapacity) {
  TestObject object(1024);
  SharedMemoryRegistry registry;
  ASSERT_TRUE(registry.Register("out", object.key(), 512, 512).ok());
  auto place = registry.Open("out", 8, 16);
  ASSERT_TRUE(place.ok());
  EXPECT_EQ(SharedMemoryRegistry::Capacity(**place), 16u);
  ASSERT_TRUE(SharedMemoryRegistry::Write(**place, "0123456789abcdef").ok());
  EXPECT_EQ(object.Get(520, 16), "0123456789abcdef");
  EXPECT_EQ(object.Get(519, 1)[0], TestObject::Pattern(519));  // nothing before it touched
  Status too_big = SharedMemoryRegistry::Write(**place, std::string(17, 'x'));
  EXPECT_EQ(too_big.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(too_big, "17") && Contains(too_big, "16")) << too_big.message();
  EXPECT_EQ(object.Get(536, 1)[0], TestObject::Pattern(536));  // not written at all
}

// The client shrinks its object after registration: with a mapping this
// would be a SIGBUS in the router; here it is an error naming the region.
TEST(ShmRegistryTest, ObjectTruncatedAfterRegistrationIsAnErrorNotACrash) {
  TestObject object(8192);
  SharedMemoryRegistry registry;
  ASSERT_TRUE(registry.Register("r", object.key(), 4096, 4096).ok());
  auto place = registry.Open("r", 0, 4096);
  ASSERT_TRUE(place.ok());
  object.Truncate(5000);  // the region's first 904 bytes remain

  EXPECT_TRUE(registry.Read("r", 0, 904).ok());
  Status shrunk = registry.Read("r", 0, 4096).status();
  EXPECT_EQ(shrunk.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(shrunk, "'r'") && Contains(shrunk, "truncated")) << shrunk.message();
  Status write = SharedMemoryRegistry::Write(**place, std::string(1000, 'w'));
  EXPECT_EQ(write.code(), StatusCode::kInvalidArgument) << write.ToString();
  EXPECT_TRUE(Contains(write, "truncated")) << write.message();
  // The write did not grow the client's object back.
  struct stat st {};
  const int fd = ::shm_open(object.key().c_str(), O_RDONLY, 0);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::fstat(fd, &st), 0);
  ::close(fd);
  EXPECT_EQ(st.st_size, 5000);

  object.Truncate(0);
  EXPECT_EQ(registry.Read("r", 0, 1).status().code(), StatusCode::kInvalidArgument);
}

// Unlinking only removes the name: the registered descriptor still reads the
// object the client registered (as a mapping would), and nothing faults.
TEST(ShmRegistryTest, ObjectUnlinkedAfterRegistrationStillReads) {
  auto object = std::make_unique<TestObject>(256);
  const std::string expected = object->Get(0, 256);
  SharedMemoryRegistry registry;
  ASSERT_TRUE(registry.Register("r", object->key(), 0, 256).ok());
  object.reset();  // close + shm_unlink
  auto bytes = registry.Read("r", 0, 256);
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  EXPECT_EQ(*bytes, expected);
}

TEST(ShmRegistryTest, UnregisterWhileARegionIsHeld) {
  TestObject object(1024);
  SharedMemoryRegistry registry;
  ASSERT_TRUE(registry.Register("out", object.key(), 0, 1024).ok());
  auto place = registry.Open("out", 100, 10);
  ASSERT_TRUE(place.ok());
  ASSERT_TRUE(registry.Unregister("out").ok());
  // The request that opened it still writes (its descriptor stays open)...
  ASSERT_TRUE(SharedMemoryRegistry::Write(**place, "held-write").ok());
  EXPECT_EQ(object.Get(100, 10), "held-write");
  // ...while new users find it gone, and the name can be registered again.
  EXPECT_EQ(registry.Open("out", 0, 1).status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(registry.Register("out", object.key(), 0, 16).ok());
  registry.UnregisterAll();
  ASSERT_TRUE(SharedMemoryRegistry::Write(**place, "again").ok());
}

TEST(ShmRegistryTest, RegionCountIsBounded) {
  TestObject object(64);
  SharedMemoryRegistry registry;
  for (size_t i = 0; i < SharedMemoryRegistry::kMaxRegions; ++i) {
    std::string name = "r";
    name += std::to_string(i);
    ASSERT_TRUE(registry.Register(name, object.key(), 0, 64).ok()) << i;
  }
  Status over = registry.Register("one_more", object.key(), 0, 64);
  EXPECT_EQ(over.code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(Contains(over, std::to_string(SharedMemoryRegistry::kMaxRegions))) << over.message();
  ASSERT_TRUE(registry.Unregister("r0").ok());
  EXPECT_TRUE(registry.Register("one_more", object.key(), 0, 64).ok());
}

// Readers and writers race registration and unregistration (run under TSan
// in CI): every call answers OK or NOT_FOUND, nothing else, nothing crashes.
TEST(ShmRegistryTest, ConcurrentUseAndUnregistration) {
  TestObject object(4096);
  SharedMemoryRegistry registry;
  std::atomic<bool> stop{false};
  std::atomic<int> unexpected{0};
  std::atomic<int> reads_ok{0};
  std::atomic<int> calls{0};
  std::vector<std::thread> users;
  for (int t = 0; t < 4; ++t) {
    users.emplace_back([&] {
      uint8_t buf[256];
      while (!stop.load()) {
        Status r = registry.ReadInto("r", 0, sizeof(buf), buf);
        auto place = registry.Open("r", 256, 256);
        Status w = place.ok() ? SharedMemoryRegistry::Write(**place, std::string(256, 'z')) : place.status();
        for (const Status& s : {r, w}) {
          if (!s.ok() && s.code() != StatusCode::kNotFound) unexpected.fetch_add(1);
        }
        if (r.ok()) reads_ok.fetch_add(1);
        calls.fetch_add(1);
      }
    });
  }
  // Until the users have made enough calls, some of them on a registered region.
  for (int i = 0; i < 300 || calls.load() < 2000 || reads_ok.load() < 100; ++i) {
    EXPECT_TRUE(registry.Register("r", object.key(), 0, 4096).ok());
    std::this_thread::yield();
    if (i % 2) {
      EXPECT_TRUE(registry.Unregister("r").ok());
    } else {
      registry.UnregisterAll();
    }
  }
  stop.store(true);
  for (auto& t : users) t.join();
  EXPECT_EQ(unexpected.load(), 0);
}

// ---- the codec: inputs and outputs in shared memory ----------------------

class ShmCodecTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ModelConfig m;
    m.name = "two";
    m.platform = "torchscript";
    m.max_batch_size = 0;
    m.inputs = {{"a", DataType::kFp32, {4}}, {"b", DataType::kFp32, {2}}};
    m.outputs = {{"x", DataType::kFp32, {4}}, {"y", DataType::kFp32, {2}}};
    m.versions = {1};
    config_.models["two"] = m;
    ModelConfig b = m;
    b.name = "flags";
    b.inputs = {{"a", DataType::kBool, {4}}};
    b.outputs = {{"x", DataType::kBool, {4}}};
    config_.models["flags"] = b;
    config_.limits.max_request_bytes = 1 << 20;
    ASSERT_TRUE(registry_.Register("in", object_.key(), 0, 512).ok());
    ASSERT_TRUE(registry_.Register("out", object_.key(), 512, 512).ok());
  }

  inference::ModelInferRequest Request() {
    inference::ModelInferRequest r;
    r.set_model_name("two");
    for (auto [name, n] : {std::pair<const char*, int>{"a", 4}, {"b", 2}}) {
      auto* in = r.add_inputs();
      in->set_name(name);
      in->set_datatype("FP32");
      in->add_shape(n);
    }
    return r;
  }
  template <typename Tensor>
  static void Shm(Tensor* t, const std::string& region, int64_t bytes, std::optional<int64_t> offset = {}) {
    auto& p = *t->mutable_parameters();
    p["shared_memory_region"].set_string_param(region);
    p["shared_memory_byte_size"].set_int64_param(bytes);
    if (offset) p["shared_memory_offset"].set_int64_param(*offset);
  }
  static std::string Floats(std::initializer_list<float> v) {
    return std::string(reinterpret_cast<const char*>(std::data(v)), v.size() * sizeof(float));
  }

  TestObject object_{1024};
  SharedMemoryRegistry registry_;
  ServerConfig config_;
};

TEST_F(ShmCodecTest, InputFromARegionAndRawForTheRest) {
  object_.Put(64, Floats({1, 2, 3, 4}));
  auto r = Request();
  Shm(r.mutable_inputs(0), "in", 16, 64);
  r.add_raw_input_contents(Floats({5, 6}));  // only b: a is in shared memory
  auto decoded = DecodeInferRequest(r, config_, &registry_);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  const InferInput& a = (*decoded)->inputs[0];
  ASSERT_EQ(a.bytes, 16u);
  // Read when submitted, straight into the host's arena: nothing is copied yet.
  ASSERT_TRUE(a.read_into) << "a shared-memory input is read at submission";
  EXPECT_EQ(a.data, nullptr);
  std::string read(a.bytes, '\0');
  ASSERT_TRUE(a.read_into(reinterpret_cast<uint8_t*>(read.data())).ok());
  EXPECT_EQ(read, Floats({1, 2, 3, 4}));
  // A client that shrinks its object after the request was accepted: the
  // read fails, naming the input and the region, and nothing crashes.
  object_.Truncate(70);
  Status shrank = a.read_into(reinterpret_cast<uint8_t*>(read.data()));
  EXPECT_EQ(shrank.code(), StatusCode::kInvalidArgument) << shrank.ToString();
  EXPECT_NE(shrank.message().find("input 'a'"), std::string::npos) << shrank.message();
  object_.Put(64, Floats({1, 2, 3, 4}));
  const InferInput& b = (*decoded)->inputs[1];
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(b.data), b.bytes), Floats({5, 6}));

  // Triton's rule: a raw entry per input not in shared memory, no more.
  r.add_raw_input_contents(Floats({7, 8}));
  Status extra = DecodeInferRequest(r, config_, &registry_).status();
  EXPECT_EQ(extra.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(extra.message().find("2 raw_input_contents for 1 input(s) not in shared memory"), std::string::npos)
      << extra.message();
}

TEST_F(ShmCodecTest, InputErrorsNameTheInputAndRegion) {
  auto with = [&](const std::string& region, int64_t bytes, int64_t offset) {
    auto r = Request();
    Shm(r.mutable_inputs(0), region, bytes, offset);
    r.add_raw_input_contents(Floats({5, 6}));
    return DecodeInferRequest(r, config_, &registry_).status();
  };
  Status size = with("in", 12, 0);  // the tensor needs 16
  EXPECT_EQ(size.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(size.message().find("input 'a'"), std::string::npos);
  EXPECT_NE(size.message().find("16"), std::string::npos) << size.message();
  Status unknown = with("nope", 16, 0);
  EXPECT_EQ(unknown.code(), StatusCode::kNotFound);
  EXPECT_NE(unknown.message().find("input 'a'"), std::string::npos);
  EXPECT_NE(unknown.message().find("'nope'"), std::string::npos) << unknown.message();
  Status outside = with("in", 16, 500);
  EXPECT_EQ(outside.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(outside.message().find("'in'"), std::string::npos) << outside.message();
  EXPECT_EQ(with("in", 16, std::numeric_limits<int64_t>::max()).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(with("in", 16, -2).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(with("in", -16, 0).code(), StatusCode::kInvalidArgument);

  // Without a registry (a path without shared memory): refused, named.
  auto r = Request();
  Shm(r.mutable_inputs(0), "in", 16);
  r.add_raw_input_contents(Floats({5, 6}));
  Status none = DecodeInferRequest(r, config_, nullptr).status();
  EXPECT_EQ(none.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(none.message().find("input 'a'"), std::string::npos) << none.message();
}

TEST_F(ShmCodecTest, ParametersFollowTritonsRules) {
  auto r = Request();
  (*r.mutable_inputs(0)->mutable_parameters())["shared_memory_region"].set_string_param("in");
  r.add_raw_input_contents(Floats({5, 6}));
  Status no_size = DecodeInferRequest(r, config_, &registry_).status();
  EXPECT_EQ(no_size.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(no_size.message().find("shared_memory_byte_size"), std::string::npos) << no_size.message();

  auto orphan = Request();
  (*orphan.mutable_inputs(0)->mutable_parameters())["shared_memory_offset"].set_int64_param(0);
  orphan.add_raw_input_contents(Floats({1, 2, 3, 4}));
  orphan.add_raw_input_contents(Floats({5, 6}));
  Status s = DecodeInferRequest(orphan, config_, &registry_).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("without 'shared_memory_region'"), std::string::npos) << s.message();

  auto wrong_type = Request();
  (*wrong_type.mutable_inputs(0)->mutable_parameters())["shared_memory_region"].set_int64_param(1);
  EXPECT_EQ(DecodeInferRequest(wrong_type, config_, &registry_).status().code(), StatusCode::kInvalidArgument);

  // Shared memory and typed contents for one input: one source only.
  auto typed = Request();
  Shm(typed.mutable_inputs(0), "in", 16);
  for (float v : {1.f, 2.f, 3.f, 4.f}) typed.mutable_inputs(0)->mutable_contents()->add_fp32_contents(v);
  for (float v : {5.f, 6.f}) typed.mutable_inputs(1)->mutable_contents()->add_fp32_contents(v);
  Status both = DecodeInferRequest(typed, config_, &registry_).status();
  EXPECT_EQ(both.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(both.message().find("shared memory and typed contents"), std::string::npos) << both.message();
}

TEST_F(ShmCodecTest, BoolBytesFromARegionAreChecked) {
  object_.Put(0, std::string("\x01\x00\x02\x01", 4));
  inference::ModelInferRequest r;
  r.set_model_name("flags");
  auto* in = r.add_inputs();
  in->set_name("a");
  in->set_datatype("BOOL");
  in->add_shape(4);
  Shm(in, "in", 4);
  Status s = DecodeInferRequest(r, config_, &registry_).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("element 2"), std::string::npos) << s.message();
}

TEST_F(ShmCodecTest, OutputsGoToTheirRegion) {
  auto r = Request();
  r.add_raw_input_contents(Floats({1, 2, 3, 4}));
  r.add_raw_input_contents(Floats({5, 6}));
  auto* x = r.add_outputs();
  x->set_name("x");
  Shm(x, "out", 16, 32);
  r.add_outputs()->set_name("y");  // in the message
  auto decoded = DecodeInferRequest(r, config_, &registry_);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();

  InferResponse answer;
  answer.outputs = {{"x", DataType::kFp32, {4}, Floats({9, 8, 7, 6})}, {"y", DataType::kFp32, {2}, Floats({1, 0})}};
  inference::ModelInferResponse proto;
  ASSERT_TRUE(EncodeInferResponse(**decoded, answer, &proto).ok());
  EXPECT_EQ(object_.Get(512 + 32, 16), Floats({9, 8, 7, 6}));
  ASSERT_EQ(proto.outputs_size(), 2);
  ASSERT_EQ(proto.raw_output_contents_size(), 2);  // aligned with outputs, as Triton
  EXPECT_EQ(proto.raw_output_contents(0), "");
  EXPECT_EQ(proto.raw_output_contents(1), Floats({1, 0}));
  const auto& params = proto.outputs(0).parameters();
  EXPECT_EQ(params.at("shared_memory_region").string_param(), "out");
  EXPECT_EQ(params.at("shared_memory_byte_size").int64_param(), 16);
  EXPECT_EQ(params.at("shared_memory_offset").int64_param(), 32);
  EXPECT_EQ(proto.outputs(0).shape_size(), 1);
  EXPECT_TRUE(proto.outputs(1).parameters().empty());

  // An output bigger than the room given: an error naming it and both sizes.
  auto small = Request();
  small.add_raw_input_contents(Floats({1, 2, 3, 4}));
  small.add_raw_input_contents(Floats({5, 6}));
  auto* sx = small.add_outputs();
  sx->set_name("x");
  Shm(sx, "out", 12);
  auto small_decoded = DecodeInferRequest(small, config_, &registry_);
  ASSERT_TRUE(small_decoded.ok());
  inference::ModelInferResponse small_proto;
  Status too_small = EncodeInferResponse(**small_decoded, answer, &small_proto);
  EXPECT_EQ(too_small.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(too_small.message().find("output 'x'"), std::string::npos);
  EXPECT_NE(too_small.message().find("16 bytes"), std::string::npos);
  EXPECT_NE(too_small.message().find("12"), std::string::npos) << too_small.message();
  EXPECT_EQ(small_proto.outputs_size(), 0);

  // Unknown output region: refused at decode, before any run.
  auto bad = Request();
  bad.add_raw_input_contents(Floats({1, 2, 3, 4}));
  bad.add_raw_input_contents(Floats({5, 6}));
  auto* bx = bad.add_outputs();
  bx->set_name("x");
  Shm(bx, "nope", 16);
  Status unknown = DecodeInferRequest(bad, config_, &registry_).status();
  EXPECT_EQ(unknown.code(), StatusCode::kNotFound);
  EXPECT_NE(unknown.message().find("output 'x'"), std::string::npos) << unknown.message();
}

}  // namespace
}  // namespace es
