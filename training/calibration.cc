#include "training/calibration.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace es {
namespace {

constexpr double kMinProbability = 1e-12;

struct Bin {
  int64_t rows = 0;
  int64_t correct = 0;
  double confidence = 0;  // sum over the bin's rows
};

}  // namespace

ClassifierScores ScoreClassifier(const at::Tensor& probabilities, const at::Tensor& labels, int bins) {
  TORCH_CHECK(probabilities.dim() == 2, "ScoreClassifier: probabilities must be [N, C], got ", probabilities.sizes());
  TORCH_CHECK(labels.dim() == 1 && labels.size(0) == probabilities.size(0), "ScoreClassifier: labels must be [",
              probabilities.size(0), "], got ", labels.sizes());
  TORCH_CHECK(bins >= 1, "ScoreClassifier: bins must be >= 1, got ", bins);
  const int64_t n = probabilities.size(0);
  const int64_t c = probabilities.size(1);
  ClassifierScores scores;
  scores.rows = n;
  if (n == 0) return scores;
  TORCH_CHECK(c >= 1, "ScoreClassifier: probabilities have no classes");
  // One copy to contiguous double, then plain loops: N*C is small (10^5) and
  // the loops read more clearly than a chain of tensor ops.
  const at::Tensor p = probabilities.to(at::kDouble).contiguous();
  const at::Tensor y = labels.to(at::kLong).contiguous();
  const double* prob = p.data_ptr<double>();
  const int64_t* label = y.data_ptr<int64_t>();

  std::vector<Bin> hist(static_cast<size_t>(bins));
  double nll = 0, brier = 0;
  int64_t correct = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double* row = prob + i * c;
    const int64_t k = label[i];
    TORCH_CHECK(k >= 0 && k < c, "ScoreClassifier: label ", k, " at row ", i, " is outside [0, ", c, ")");
    const int64_t argmax = std::max_element(row, row + c) - row;
    double squares = 0;
    for (int64_t j = 0; j < c; ++j) {
      const double diff = row[j] - (j == k ? 1.0 : 0.0);
      squares += diff * diff;
    }
    brier += squares;
    nll -= std::log(std::max(row[k], kMinProbability));
    const bool hit = argmax == k;
    correct += hit ? 1 : 0;
    const double confidence = row[argmax];
    const double position = confidence * bins;  // NaN and < 0 land in bin 0, >= 1 in the last
    const size_t b = position >= bins - 1 ? static_cast<size_t>(bins - 1)
                     : position > 0       ? static_cast<size_t>(position)
                                          : 0;
    hist[b].rows += 1;
    hist[b].correct += hit ? 1 : 0;
    hist[b].confidence += confidence;
  }
  const auto total = static_cast<double>(n);
  scores.accuracy = static_cast<double>(correct) / total;
  scores.nll = nll / total;
  scores.brier = brier / total;
  for (const Bin& bin : hist) {
    if (bin.rows == 0) continue;
    const auto rows = static_cast<double>(bin.rows);
    scores.ece += rows / total * std::abs(static_cast<double>(bin.correct) / rows - bin.confidence / rows);
  }
  return scores;
}

}  // namespace es
