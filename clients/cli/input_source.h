// ensemble-cli's input tensors: parsed from a source string and converted to
// the datatype the model's metadata declares.
//
//   random        seeded random data (floats in [0, 1), integers in [0, 10))
//   PATH.npy      a NumPy .npy file (v1-v3, little-endian or 1-byte dtypes,
//                 C order); its shape is used as is, or with a batch dim of 1
//                 prepended when it has one dim fewer than the model's input
//   PATH.json     a JSON array, nested (its nesting gives the shape) or flat
//   json:[...]    the same, inline
//   raw:PATH      raw bytes already in the model's datatype; the shape is the
//                 metadata's with the batch dim taken from the file's size
//
// Numbers are converted to the model's datatype (through double), so an
// .npy of float64 feeds an FP32 input. Contract: pure functions, no I/O but
// reading the named file; an error is a Status whose message is one line
// naming the source: INVALID_ARGUMENT for data that does not make the
// tensor; for a file that cannot be read or written, NOT_FOUND,
// PERMISSION_DENIED or (another errno) UNKNOWN.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "common/status.h"

namespace es::cli {

struct Tensor {
  std::string datatype;  // KServe name
  std::vector<int64_t> shape;
  std::string bytes;     // row-major, little-endian, `datatype` elements
};

// `model_shape` is the metadata shape (-1 = variable; a leading -1 is the
// batch dim, given `batch` rows for `random`).
es::StatusOr<Tensor> LoadInput(const std::string& source, const std::string& datatype,
                               const std::vector<int64_t>& model_shape, int64_t batch, std::mt19937& rng);

// An .npy file's dtype, shape and data as doubles (exposed for tests).
struct NpyArray {
  std::string descr;  // e.g. "<f4"
  std::vector<int64_t> shape;
  std::vector<double> values;
};
es::StatusOr<NpyArray> ReadNpy(const std::string& path);
// The same on the file's bytes (`name` only labels errors): no I/O, so the
// fuzzer (tests/fuzz) and tests can feed it any buffer.
es::StatusOr<NpyArray> ParseNpy(const std::string& data, const std::string& name);
// Writes float32 data as an .npy v1 file (tests, examples).
es::Status WriteNpyFloat32(const std::string& path, const std::vector<int64_t>& shape,
                           const std::vector<float>& values);

// Element i of a raw tensor as a double.
double ElementAsDouble(const std::string& datatype, const std::string& bytes, size_t i);

}  // namespace es::cli
