// BLAS kernels: makes LibTorch's OpenBLAS use the kernels this CPU can run.
//
// Debian's LibTorch does its CPU matrix products in the system BLAS. OpenBLAS
// (0.3.21 in Debian 12) picks its kernels by CPU model at load time, and on a
// model it does not know it falls back to its generic "Prescott" (SSE3)
// kernels: on this project's development VM (an AVX-512 Xeon) that made a
// batch-1 forward of the 784-256-10 MLP about four times slower than with
// the AVX-512 kernels. OpenBLAS reads OPENBLAS_CORETYPE only when it is
// loaded, which is before main(), so the fix is to set it and exec again.
//
// Contract: UseTheCpusBlasKernels(argv) is called early in main() of every
// program that computes with LibTorch (right after its flags are parsed, so
// a bad flag is reported in one line), before it starts threads of its own
// or computes anything (OpenBLAS's own workers, started when it loads, end
// with the exec). It
// returns at once unless (a) OpenBLAS is loaded, (b) OPENBLAS_CORETYPE is
// unset, (c) OpenBLAS chose Prescott, and (d) the CPU has AVX or better; then
// it sets OPENBLAS_CORETYPE (BlasCoreTypeFor) and re-executes the program
// with the same arguments, pid, descriptors, affinity and parent-death
// signal. It returns if that exec fails, or if the program was started
// through the dynamic loader (which the exec would run instead). Setting OPENBLAS_CORETYPE yourself (any value)
// turns it off. It says what it did in one note: on stderr (BlasNote::kStderr),
// or (kDeferred) through the environment to the program run again, where
// TakeBlasKernelsNote() hands it to the program's logger once that is set
// up: a model host writing JSON log lines must not write a plain one.
#pragma once

#include <string>

namespace es {

struct CpuFeatures {
  bool avx = false;
  bool avx2 = false;
  bool fma = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512dq = false;
  bool avx512vl = false;
};

// The features of the CPU this runs on.
CpuFeatures DetectCpuFeatures();

// The OpenBLAS core type for these features: "SKYLAKEX" (AVX-512 F/BW/DQ/VL),
// "HASWELL" (AVX2 + FMA), "SANDYBRIDGE" (AVX), or "" (nothing better than
// OpenBLAS's generic kernels).
std::string BlasCoreTypeFor(const CpuFeatures& cpu);

// The kernels the loaded OpenBLAS uses ("Prescott", "SkylakeX", ...), or ""
// when the process has no OpenBLAS.
std::string LoadedBlasCoreName();

enum class BlasNote { kStderr, kDeferred };
void UseTheCpusBlasKernels(char** argv, BlasNote note = BlasNote::kStderr);

// The note a kDeferred UseTheCpusBlasKernels left ("OpenBLAS does not know
// this CPU ..."), or "" when none. Once: it removes the variable, so the
// program's own children do not repeat it. Call it before starting threads
// (it changes the environment).
std::string TakeBlasKernelsNote();

// Makes OpenBLAS compute on the calling thread only (no pool of its own),
// as in a host, whose OPENBLAS_NUM_THREADS is its `threads`: an in-process
// baseline whose workers each use one intra-op thread is otherwise not one
// thread per worker at all (OpenBLAS's pool spreads each product over every
// core). Returns OpenBLAS's thread count afterwards, or 0 without OpenBLAS.
int LimitBlasThreads(int threads);

// Pins the calling thread to `cpu` (as a host is pinned to its CPU); false
// when the CPU cannot be used.
bool PinThisThread(int cpu);

}  // namespace es
