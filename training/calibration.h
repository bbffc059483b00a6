// ScoreClassifier: how good and how honest a classifier's probabilities are,
// for ensemble-train's evaluation of members and of the ensemble.
//
//   accuracy  share of rows whose argmax (the first, on ties) is the label
//   nll       mean of -log(max(p[label], 1e-12)): the clamp keeps one
//             confidently wrong row from making the mean infinite
//   brier     mean over rows of sum_c (p_c - onehot(label)_c)^2, in [0, 2]
//   ece       expected calibration error over `bins` equal-width confidence
//             bins, confidence = max_c p_c: sum_b (n_b / N) |acc_b - conf_b|.
//             Bin b holds confidences in [b/bins, (b+1)/bins); 1.0 goes in
//             the last bin.
//
// Inputs: probabilities [N, C] (rows summing to 1; any floating type),
// labels [N] integer in [0, C), bins >= 1. Like a LibTorch op, a violation
// throws c10::Error; N == 0 gives all-zero scores with rows == 0. Computed in
// double precision.
//
// Thread safety: a pure function; safe to call concurrently.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace es {

struct ClassifierScores {
  double accuracy = 0;
  double nll = 0;
  double brier = 0;
  double ece = 0;
  int64_t rows = 0;
};

ClassifierScores ScoreClassifier(const at::Tensor& probabilities, const at::Tensor& labels, int bins = 15);

}  // namespace es
