// UseTheCpusBlasKernels (torch_utils/blas_kernels.h): the kernel class chosen
// for a CPU, and, through a real LibTorch program (blas_probe), that a
// program OpenBLAS put on its generic kernels restarts on the CPU's own with
// its arguments intact, while a user's OPENBLAS_CORETYPE is left alone.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <memory>
#include <string>

#include "tests/common/test_paths.h"
#include "torch_utils/blas_kernels.h"

namespace {

// Runs `command` through the shell; returns its stdout (stderr passes through).
std::string RunShell(const std::string& command) {
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command.c_str(), "r"), pclose);
  if (!pipe) return "";
  std::string out;
  std::array<char, 256> chunk{};
  while (fgets(chunk.data(), static_cast<int>(chunk.size()), pipe.get()) != nullptr) out += chunk.data();
  return out;
}

TEST(BlasKernelsTest, CoreTypeFollowsTheWidestVectorUnits) {
  es::CpuFeatures cpu;
  EXPECT_EQ(es::BlasCoreTypeFor(cpu), "");
  cpu.avx = true;
  EXPECT_EQ(es::BlasCoreTypeFor(cpu), "SANDYBRIDGE");
  cpu.avx2 = true;
  EXPECT_EQ(es::BlasCoreTypeFor(cpu), "SANDYBRIDGE") << "AVX2 without FMA is not Haswell";
  cpu.fma = true;
  EXPECT_EQ(es::BlasCoreTypeFor(cpu), "HASWELL");
  cpu.avx512f = cpu.avx512bw = cpu.avx512dq = true;
  EXPECT_EQ(es::BlasCoreTypeFor(cpu), "HASWELL") << "SkylakeX kernels need AVX-512 VL too";
  cpu.avx512vl = true;
  EXPECT_EQ(es::BlasCoreTypeFor(cpu), "SKYLAKEX");
}

TEST(BlasKernelsTest, ProgramRunsOnKernelsForThisCpuWithItsArgumentsIntact) {
  const std::string out =
      RunShell("env -u OPENBLAS_CORETYPE '" + std::string(es::test_paths::kBlasProbeBin) + "' --flag 'two words'");
  ASSERT_NE(out.find("sum=262144"), std::string::npos) << out;
  EXPECT_NE(out.find("args=--flag two words "), std::string::npos) << out;
  if (out.find("core= ") != std::string::npos) GTEST_SKIP() << "LibTorch's BLAS here is not OpenBLAS: " << out;
  const std::string wanted = es::BlasCoreTypeFor(es::DetectCpuFeatures());
  if (wanted.empty()) GTEST_SKIP() << "this CPU has no AVX: OpenBLAS's generic kernels are the right ones";
  EXPECT_EQ(out.find("core=Prescott"), std::string::npos) << out;
}

// A model host logs JSON lines: its note waits for its logger (the
// environment carries it through the exec) instead of a plain stderr line.
TEST(BlasKernelsTest, DeferredNoteReachesTheProgramRunAgainAndNotStderr) {
  const std::string out = RunShell("env -u OPENBLAS_CORETYPE ES_PROBE_DEFERRED=1 '" +
                                   std::string(es::test_paths::kBlasProbeBin) + "' y 2>&1");
  ASSERT_NE(out.find("sum=262144"), std::string::npos) << out;
  EXPECT_EQ(out.find("note: "), std::string::npos) << "a plain line on stderr: " << out;
  EXPECT_NE(out.find(" left=-"), std::string::npos) << "the note's variable outlived its taking: " << out;
  if (out.find("note= left") != std::string::npos) {
    GTEST_SKIP() << "OpenBLAS here chose this CPU's kernels itself: nothing to note (" << out << ")";
  }
  EXPECT_NE(out.find("note=OpenBLAS does not know this CPU"), std::string::npos) << out;
  EXPECT_NE(out.find("OPENBLAS_CORETYPE=" + es::BlasCoreTypeFor(es::DetectCpuFeatures())), std::string::npos) << out;
}

TEST(BlasKernelsTest, UsersCoreTypeIsLeftAlone) {
  const std::string out = RunShell("OPENBLAS_CORETYPE=PRESCOTT '" + std::string(es::test_paths::kBlasProbeBin) + "' x");
  ASSERT_NE(out.find("sum=262144"), std::string::npos) << out;
  EXPECT_NE(out.find("coretype=PRESCOTT args=x "), std::string::npos) << out;
  if (out.find("core= ") != std::string::npos) GTEST_SKIP() << "LibTorch's BLAS here is not OpenBLAS: " << out;
  EXPECT_NE(out.find("core=Prescott"), std::string::npos) << out;
}

}  // namespace
