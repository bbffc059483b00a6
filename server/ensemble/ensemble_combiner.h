// EnsembleCombiner: the arithmetic that turns member outputs into the
// ensemble's output and its uncertainty. Pure functions over InferOutputs, so
// they are unit-tested without hosts.
//
// Rules (per output tensor, members' tensors must agree in shape and type,
// FP32 or FP64):
//   mean          : element-wise mean of the members (of probabilities).
//   weighted_mean : element-wise sum of w_i * x_i with weights normalised to 1.
//   majority_vote : per row, the fraction of members whose argmax is each
//                   class: [rows, classes] vote shares, so the ensemble's
//                   argmax is the majority class (ties: the lowest index).
// Uncertainty, per row of the first output (read as class probabilities):
//   entropy       : -sum p log p of the combined distribution (nats).
//   disagreement  : fraction of members whose argmax differs from the
//                   ensemble's argmax.
//
// A packed member's output is first split into its members' (SplitPacked).
//
// Thread safety: stateless.
#pragma once

#include <vector>

#include "config/model_config.h"
#include "common/status.h"
#include "server/core/infer_types.h"

namespace es {

// members[m] is member m's output tensor (same name across members).
StatusOr<InferOutput> CombineOutputs(const std::vector<const InferOutput*>& members,
                                     const std::vector<double>& weights, CombineRule rule);

// A packed member's output [rows, count, ...] as its `count` members'
// outputs [rows, ...] (member k's from [:, k]), named as `packed` is. The
// output comes from a host: its shape must have the packed axis of `count`
// and its data exactly the bytes its shape says (checked without overflow),
// or Internal naming the output.
StatusOr<std::vector<InferOutput>> SplitPacked(const InferOutput& packed, size_t count);

struct Uncertainty {
  InferOutput entropy;       // FP32 [rows]
  InferOutput disagreement;  // FP32 [rows]
};

StatusOr<Uncertainty> ComputeUncertainty(const InferOutput& combined,
                                         const std::vector<const InferOutput*>& members);

}  // namespace es
