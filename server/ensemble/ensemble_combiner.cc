#include "server/ensemble/ensemble_combiner.h"

#include <cmath>
#include <cstring>
#include <string>

#include "common/checked_math.h"

namespace es {
namespace {

// Rows and classes of a tensor read as [rows, classes...]: a rank-1 tensor is
// one row.
void RowsAndClasses(const InferOutput& t, int64_t* rows, int64_t* classes) {
  int64_t n = 1;
  for (int64_t d : t.shape) n *= d;
  *rows = t.shape.size() >= 2 ? t.shape[0] : 1;
  *classes = *rows > 0 ? n / *rows : 0;
}

template <typename T>
const T* As(const InferOutput& t) {
  return reinterpret_cast<const T*>(t.data.data());
}

template <typename T>
int64_t ArgMax(const T* row, int64_t classes) {
  int64_t best = 0;
  for (int64_t c = 1; c < classes; ++c) {
    if (row[c] > row[best]) best = c;
  }
  return best;
}

Status CheckAgree(const std::vector<const InferOutput*>& members) {
  if (members.empty()) return Status::Internal("ensemble combine with no members");
  const InferOutput& first = *members[0];
  if (first.datatype != DataType::kFp32 && first.datatype != DataType::kFp64) {
    return Status::InvalidArgument("ensemble output '" + first.name + "' is " + DataTypeName(first.datatype) +
                                   "; only FP32 and FP64 outputs can be combined");
  }
  // The data must be exactly what the shape says: the arithmetic below
  // indexes rows and classes from the shape, never from the data's size.
  const auto bytes = TensorBytes(first.shape, DataTypeSize(first.datatype));
  if (!bytes || *bytes != first.data.size()) {
    return Status::Internal("ensemble member output '" + first.name + "' has " + std::to_string(first.data.size()) +
                            " bytes, which is not what its shape says");
  }
  for (const InferOutput* m : members) {
    if (m->datatype != first.datatype || m->shape != first.shape || m->data.size() != first.data.size()) {
      return Status::Internal("ensemble members returned output '" + first.name +
                              "' with different shapes or types");
    }
  }
  return Status::Ok();
}

template <typename T>
InferOutput Combine(const std::vector<const InferOutput*>& members, const std::vector<double>& weights,
                    CombineRule rule) {
  const InferOutput& first = *members[0];
  InferOutput out{first.name, first.datatype, first.shape, std::string(first.data.size(), '\0')};
  T* dst = reinterpret_cast<T*>(out.data.data());
  const size_t n = first.data.size() / sizeof(T);
  if (rule == CombineRule::kMajorityVote) {
    int64_t rows = 0, classes = 0;
    RowsAndClasses(first, &rows, &classes);
    if (n == 0 || classes == 0) return out;  // nothing to vote on (an empty output)
    const T share = T(1) / static_cast<T>(members.size());
    for (const InferOutput* m : members) {
      for (int64_t r = 0; r < rows; ++r) dst[r * classes + ArgMax(As<T>(*m) + r * classes, classes)] += share;
    }
    return out;
  }
  double total = 0;
  for (size_t i = 0; i < members.size(); ++i) total += rule == CombineRule::kWeightedMean ? weights[i] : 1.0;
  for (size_t i = 0; i < members.size(); ++i) {
    const T w = static_cast<T>((rule == CombineRule::kWeightedMean ? weights[i] : 1.0) / total);
    const T* src = As<T>(*members[i]);
    for (size_t k = 0; k < n; ++k) dst[k] += w * src[k];
  }
  return out;
}

template <typename T>
Uncertainty Measure(const InferOutput& combined, const std::vector<const InferOutput*>& members) {
  int64_t rows = 0, classes = 0;
  RowsAndClasses(combined, &rows, &classes);
  Uncertainty u;
  u.entropy = {"entropy", DataType::kFp32, {rows}, std::string(rows * sizeof(float), '\0')};
  u.disagreement = {"disagreement", DataType::kFp32, {rows}, std::string(rows * sizeof(float), '\0')};
  auto* entropy = reinterpret_cast<float*>(u.entropy.data.data());
  auto* disagreement = reinterpret_cast<float*>(u.disagreement.data.data());
  const T* p = As<T>(combined);
  for (int64_t r = 0; r < rows; ++r) {
    const T* row = p + r * classes;
    double h = 0;
    for (int64_t c = 0; c < classes; ++c) {
      if (row[c] > 0) h -= static_cast<double>(row[c]) * std::log(static_cast<double>(row[c]));
    }
    entropy[r] = static_cast<float>(h);
    const int64_t winner = ArgMax(row, classes);
    int differ = 0;
    for (const InferOutput* m : members) differ += ArgMax(As<T>(*m) + r * classes, classes) != winner;
    disagreement[r] = static_cast<float>(differ) / static_cast<float>(members.size());
  }
  return u;
}

}  // namespace

StatusOr<InferOutput> CombineOutputs(const std::vector<const InferOutput*>& members,
                                     const std::vector<double>& weights, CombineRule rule) {
  ES_RETURN_IF_ERROR(CheckAgree(members));
  if (rule == CombineRule::kWeightedMean && weights.size() != members.size()) {
    return Status::Internal("weighted_mean needs one weight per member");
  }
  if (members[0]->datatype == DataType::kFp64) return Combine<double>(members, weights, rule);
  return Combine<float>(members, weights, rule);
}

StatusOr<std::vector<InferOutput>> SplitPacked(const InferOutput& packed, size_t count) {
  const size_t item = DataTypeSize(packed.datatype);
  const auto bytes = TensorBytes(packed.shape, item);
  if (item == 0 || packed.shape.size() < 2 || packed.shape[1] != static_cast<int64_t>(count) || !bytes ||
      *bytes != packed.data.size()) {
    return Status::Internal("packed member output '" + packed.name + "' is not [rows, " + std::to_string(count) +
                            ", ...] with the bytes its shape says");
  }
  // Checked above: rows * count * inner * item is the data's size.
  const size_t rows = static_cast<size_t>(packed.shape[0]);
  const size_t inner = rows == 0 ? 0 : packed.data.size() / rows / count;  // bytes of one member's row
  std::vector<int64_t> shape = packed.shape;
  shape.erase(shape.begin() + 1);
  std::vector<InferOutput> members(count);
  for (size_t k = 0; k < count; ++k) {
    InferOutput& out = members[k];
    out.name = packed.name;
    out.datatype = packed.datatype;
    out.shape = shape;
    out.data.resize(rows * inner);
    for (size_t r = 0; r < rows; ++r) {
      std::memcpy(out.data.data() + r * inner, packed.data.data() + (r * count + k) * inner, inner);
    }
  }
  return members;
}

StatusOr<Uncertainty> ComputeUncertainty(const InferOutput& combined,
                                         const std::vector<const InferOutput*>& members) {
  ES_RETURN_IF_ERROR(CheckAgree(members));
  if (combined.datatype != members[0]->datatype || combined.shape != members[0]->shape) {
    return Status::Internal("combined output disagrees with the members");
  }
  if (combined.datatype == DataType::kFp64) return Measure<double>(combined, members);
  return Measure<float>(combined, members);
}

}  // namespace es
