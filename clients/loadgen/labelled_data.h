// ensemble-loadgen's labelled data (--inputs, --labels): real inputs sent in
// turn instead of one random request, and every answer checked against the
// labels of the rows it answers, so a run measures the accuracy of what a
// server answers under load as well as how fast it answers (an overload
// ladder trades one for the other: docs/overload.md).
//
//   --inputs FILE.npy  rows of the model's one input ([N, ...] with the
//                      input's non-batch dims; converted to its datatype as
//                      ensemble-cli converts an .npy); request i carries
//                      rows [i*batch, (i+1)*batch), the last partial batch
//                      dropped; the requests are sent in turn, and
//                      from the first again when the warm-up ends (the
//                      measured passes begin at the first row).
//   --labels FILE.npy  one integer class per row ([N]); an answer's row is
//                      correct when the index of the largest value of its
//                      output (--label-output, default the metadata's first
//                      output; all of a row's elements, flattened) equals the
//                      row's label.
//
// Contract: LoadLabelledRequests reads the files and builds the requests
// from `base` (model, version, input name, datatype and metadata shape);
// INVALID_ARGUMENT naming the file and the problem when they do not fit the
// model. CheckAnswer is pure: it never trusts the answer (the output
// missing, a datatype without a fixed size, a byte count or row count that
// does not match give `readable = false`).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "clients/api.h"
#include "clients/loadgen/engine_common.h"
#include "clients/loadgen/request_builder.h"
#include "common/status.h"

namespace es::loadgen {

struct LabelledFiles {
  std::string inputs, labels;  // .npy paths; labels may be empty (inputs only)
  std::string output;          // output checked; empty: the metadata's first
};

// The requests of `files` for `base`'s model (one input), `base.rows` rows
// each; `base.first_output` is the default of files.output.
es::StatusOr<RequestSet> LoadLabelledRequests(const LabelledFiles& files, const PreparedRequest& base);

struct AnswerCheck {
  bool readable = false;
  uint64_t rows = 0, correct = 0;
  std::string served_by;  // the answer's `served_by` parameter (an overload ladder's rung), if any
};
AnswerCheck CheckAnswer(const inference::ModelInferResponse& answer, const std::string& output,
                        const std::vector<int64_t>& labels);

}  // namespace es::loadgen
