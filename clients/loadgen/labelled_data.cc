#include "clients/loadgen/labelled_data.h"

#include <cmath>
#include <limits>
#include <random>

#include "clients/cli/input_source.h"
#include "clients/tensor.h"

namespace es::loadgen {
namespace {

es::Status Refused(const std::string& file, const std::string& what) {
  return es::Status::InvalidArgument(file + ": " + what);
}

// The labels file: one whole number per row of the inputs.
es::StatusOr<std::vector<int64_t>> ReadLabels(const std::string& path, int64_t rows) {
  auto array = es::cli::ReadNpy(path);
  if (!array.ok()) return Refused("--labels " + path, array.status().message());
  if (array->shape.size() != 1 || array->shape[0] != rows) {
    return Refused("--labels " + path, "shape " + es::client::ShapeText(array->shape) + ", expected [" +
                                           std::to_string(rows) + "] (one label per row of --inputs)");
  }
  std::vector<int64_t> labels;
  labels.reserve(array->values.size());
  for (double v : array->values) {
    if (v != std::floor(v) || v < 0 || v > 1e15) {
      return Refused("--labels " + path, "label " + std::to_string(v) + " is not a class index (a whole number >= 0)");
    }
    labels.push_back(static_cast<int64_t>(v));
  }
  return labels;
}

}  // namespace

es::StatusOr<RequestSet> LoadLabelledRequests(const LabelledFiles& files, const PreparedRequest& base) {
  const std::string flag = "--inputs " + files.inputs;
  if (base.inputs.size() != 1) {
    return Refused(flag, "model '" + base.request.model_name() + "' has " + std::to_string(base.inputs.size()) +
                             " inputs; --inputs feeds a model with one");
  }
  const InputInfo& input = base.inputs.front();
  // The input's metadata shape with a variable batch dim: the file's first
  // dim is its row count.
  std::vector<int64_t> model_shape = input.shape;
  if (model_shape.empty() || base.rows != model_shape[0]) {
    return Refused(flag, "model '" + base.request.model_name() + "' has no batch dim; --inputs needs one");
  }
  model_shape[0] = -1;
  std::mt19937 unused(0);
  auto tensor = es::cli::LoadInput(files.inputs, input.datatype, model_shape, 1, unused);
  if (!tensor.ok()) return Refused("--inputs", tensor.status().message());  // the message names the file
  const int64_t rows = tensor->shape.empty() ? 0 : tensor->shape[0];
  if (rows < base.rows) {
    return Refused(flag, std::to_string(rows) + " rows, fewer than one request of --batch " + std::to_string(base.rows));
  }
  const size_t row_bytes = tensor->bytes.size() / static_cast<size_t>(rows);
  RequestSet set;
  set.output = files.output.empty() ? base.first_output : files.output;
  std::vector<int64_t> labels;
  if (!files.labels.empty()) {
    if (set.output.empty()) return Refused(flag, "the model's metadata lists no output to check");
    ES_ASSIGN_OR_RETURN(labels, ReadLabels(files.labels, rows));
  }
  std::vector<int64_t> shape = tensor->shape;
  shape[0] = base.rows;
  const size_t request_bytes = row_bytes * static_cast<size_t>(base.rows);
  for (int64_t first = 0; first + base.rows <= rows; first += base.rows) {
    inference::ModelInferRequest request;
    request.set_model_name(base.request.model_name());
    request.set_model_version(base.request.model_version());
    const char* data = tensor->bytes.data() + static_cast<size_t>(first) * row_bytes;
    es::client::Status s = es::client::AddRawInput(&request, input.name, input.datatype, shape, data, request_bytes);
    if (!s.ok()) return Refused(flag, s.message());
    set.requests.push_back(request.SerializeAsString());
    if (!labels.empty()) set.labels.emplace_back(labels.begin() + first, labels.begin() + first + base.rows);
  }
  return set;
}

AnswerCheck CheckAnswer(const inference::ModelInferResponse& answer, const std::string& output,
                        const std::vector<int64_t>& labels) {
  AnswerCheck check;
  if (auto it = answer.parameters().find("served_by"); it != answer.parameters().end()) {
    check.served_by = it->second.string_param();
  }
  int index = -1;
  for (int i = 0; i < answer.outputs_size(); ++i) {
    if (answer.outputs(i).name() == output) index = i;
  }
  if (index < 0 || index >= answer.raw_output_contents_size()) return check;
  const auto& tensor = answer.outputs(index);
  const std::string& bytes = answer.raw_output_contents(index);
  const std::string& datatype = tensor.datatype();
  // Read through ElementAsDouble: the fixed-size numeric types it knows.
  const size_t element = es::client::DatatypeSize(datatype);
  if (element == 0 || datatype == "FP16" || datatype == "BF16" || tensor.shape_size() == 0) return check;
  const std::vector<int64_t> shape(tensor.shape().begin(), tensor.shape().end());
  const int64_t count = es::client::ElementCount(shape);  // -1 on a negative dim or an overflow
  if (count <= 0 || shape[0] != static_cast<int64_t>(labels.size()) ||
      bytes.size() / element != static_cast<uint64_t>(count) || bytes.size() % element != 0) {
    return check;
  }
  const size_t per_row = static_cast<size_t>(count / shape[0]);
  for (size_t row = 0; row < labels.size(); ++row) {
    size_t best = 0;
    double best_value = -std::numeric_limits<double>::infinity();
    for (size_t k = 0; k < per_row; ++k) {
      const double v = es::cli::ElementAsDouble(datatype, bytes, row * per_row + k);
      if (v > best_value) {
        best_value = v;
        best = k;
      }
    }
    if (static_cast<int64_t>(best) == labels[row]) ++check.correct;
  }
  check.rows = labels.size();
  check.readable = true;
  return check;
}

}  // namespace es::loadgen
