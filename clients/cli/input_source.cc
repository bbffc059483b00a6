#include "clients/cli/input_source.h"

#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "clients/tensor.h"
#include "common/checked_math.h"
#include "common/errno_text.h"

namespace es::cli {
namespace {

using es::client::ShapeText;

// A file that could not be opened or written, coded by the errno it left
// (`err`): a missing file and a forbidden one are fixed in different ways.
es::Status FileError(int err, const std::string& message) {
  if (err == ENOENT) return es::Status::NotFound(message);
  if (err == EACCES || err == EPERM) return es::Status::PermissionDenied(message);
  return es::Status(es::StatusCode::kUnknown, message);
}

es::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int err = errno;
    return FileError(err, path + ": " + es::ErrnoText(err));
  }
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Stores `v` as element i of `bytes` in `datatype`.
void PutElement(const std::string& datatype, double v, size_t i, std::string* bytes) {
  auto put = [&](auto value) { std::memcpy(bytes->data() + i * sizeof(value), &value, sizeof(value)); };
  if (datatype == "FP32") put(static_cast<float>(v));
  else if (datatype == "FP64") put(v);
  else if (datatype == "INT64") put(static_cast<int64_t>(v));
  else if (datatype == "INT32") put(static_cast<int32_t>(v));
  else if (datatype == "INT16") put(static_cast<int16_t>(v));
  else if (datatype == "INT8") put(static_cast<int8_t>(v));
  else if (datatype == "UINT64") put(static_cast<uint64_t>(v));
  else if (datatype == "UINT32") put(static_cast<uint32_t>(v));
  else if (datatype == "UINT16") put(static_cast<uint16_t>(v));
  else if (datatype == "UINT8") put(static_cast<uint8_t>(v));
  else if (datatype == "BOOL") put(static_cast<uint8_t>(v != 0));
}

// Does `shape` fit the model's (-1 matches anything)?
bool ShapeFits(const std::vector<int64_t>& shape, const std::vector<int64_t>& model_shape) {
  if (shape.size() != model_shape.size()) return false;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (model_shape[i] >= 0 && model_shape[i] != shape[i]) return false;
  }
  return true;
}

// The shape of numbers whose own shape is `given` (or flat, when empty):
// as given, or with a batch dim of 1 prepended, or (flat) the model's shape
// with its one variable dim taken from the count.
es::StatusOr<std::vector<int64_t>> ResolveShape(const std::vector<int64_t>& given, size_t count,
                                                const std::vector<int64_t>& model_shape, const std::string& source) {
  if (!given.empty()) {
    if (ShapeFits(given, model_shape)) return given;
    std::vector<int64_t> batched{1};
    batched.insert(batched.end(), given.begin(), given.end());
    if (!model_shape.empty() && model_shape[0] == -1 && ShapeFits(batched, model_shape)) return batched;
    return es::Status::InvalidArgument(source + ": shape " + ShapeText(given) + " does not fit the model's " +
                                       ShapeText(model_shape));
  }
  int64_t fixed = 1;
  int variable = -1;
  for (size_t i = 0; i < model_shape.size(); ++i) {
    if (model_shape[i] >= 0) {
      fixed *= model_shape[i];
    } else if (variable < 0) {
      variable = static_cast<int>(i);
    } else {
      return es::Status::InvalidArgument(source + ": a flat list cannot fill the model's shape " +
                                         ShapeText(model_shape) + " (two variable dims): give it nested");
    }
  }
  std::vector<int64_t> shape = model_shape;
  if (variable >= 0) {
    if (fixed == 0 || count % static_cast<size_t>(fixed) != 0) {
      return es::Status::InvalidArgument(source + ": " + std::to_string(count) + " values are not a whole number of " +
                                         std::to_string(fixed) + "-value rows of " + ShapeText(model_shape));
    }
    shape[static_cast<size_t>(variable)] = static_cast<int64_t>(count / static_cast<size_t>(fixed));
  } else if (static_cast<size_t>(fixed) != count) {
    return es::Status::InvalidArgument(source + ": " + std::to_string(count) + " values, the model's shape " +
                                       ShapeText(model_shape) + " needs " + std::to_string(fixed));
  }
  return shape;
}

// Flattens a nested JSON array; *shape gets its dims (checked rectangular).
// The message does not name the source: the caller prefixes it.
es::Status FlattenJson(const nlohmann::json& j, size_t depth, std::vector<int64_t>* shape, std::vector<double>* out) {
  const auto ragged = [&] { return es::Status::InvalidArgument("ragged array at depth " + std::to_string(depth)); };
  if (j.is_array()) {
    if (depth == shape->size()) {
      shape->push_back(static_cast<int64_t>(j.size()));
    } else if ((*shape)[depth] != static_cast<int64_t>(j.size())) {
      return ragged();
    }
    for (const auto& e : j) ES_RETURN_IF_ERROR(FlattenJson(e, depth + 1, shape, out));
    return es::Status::Ok();
  }
  if (depth != shape->size()) return ragged();
  if (j.is_boolean()) {
    out->push_back(j.get<bool>() ? 1 : 0);
  } else if (j.is_number()) {
    out->push_back(j.get<double>());
  } else {
    return es::Status::InvalidArgument("not a number: " + j.dump());
  }
  return es::Status::Ok();
}

es::StatusOr<Tensor> FromNumbers(const std::vector<double>& values, const std::vector<int64_t>& given_shape,
                                 const std::string& datatype, const std::vector<int64_t>& model_shape,
                                 const std::string& source) {
  ES_ASSIGN_OR_RETURN(std::vector<int64_t> shape, ResolveShape(given_shape, values.size(), model_shape, source));
  Tensor t{datatype, std::move(shape), std::string(values.size() * es::client::DatatypeSize(datatype), '\0')};
  for (size_t i = 0; i < values.size(); ++i) PutElement(datatype, values[i], i, &t.bytes);
  return t;
}

// `random`: the model's shape, its batch dim (if variable) `batch` rows.
es::StatusOr<Tensor> RandomInput(const std::string& datatype, const std::vector<int64_t>& model_shape, int64_t batch,
                                 std::mt19937& rng) {
  std::vector<int64_t> shape = model_shape;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] >= 0) continue;
    if (i > 0) {
      return es::Status::InvalidArgument("random: the model's shape " + ShapeText(model_shape) +
                                         " has a variable dim besides the batch dim");
    }
    shape[i] = batch;
  }
  const int64_t count = es::client::ElementCount(shape);
  if (count < 0) return es::Status::InvalidArgument("random: the shape " + ShapeText(shape) + " is too large");
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::uniform_int_distribution<int> small(0, 9);
  const bool floating = datatype == "FP32" || datatype == "FP64";
  std::vector<double> values(static_cast<size_t>(count));
  for (auto& v : values) v = floating ? unit(rng) : (datatype == "BOOL" ? small(rng) & 1 : small(rng));
  return FromNumbers(values, shape, datatype, model_shape, "random");
}

// `raw:PATH`: the bytes as they are, the batch dim from their count.
es::StatusOr<Tensor> RawInput(const std::string& path, const std::string& datatype,
                              const std::vector<int64_t>& model_shape) {
  const size_t element = es::client::DatatypeSize(datatype);
  Tensor t{datatype, {}, {}};
  ES_ASSIGN_OR_RETURN(t.bytes, ReadFile(path));
  if (t.bytes.size() % element != 0) {
    return es::Status::InvalidArgument(path + ": " + std::to_string(t.bytes.size()) + " bytes are not whole " +
                                       datatype + " elements");
  }
  ES_ASSIGN_OR_RETURN(t.shape, ResolveShape({}, t.bytes.size() / element, model_shape, path));
  return t;
}

// JSON `text` (inline or a file's); `name` labels the errors.
es::StatusOr<Tensor> JsonInput(const std::string& text, const std::string& name, const std::string& datatype,
                               const std::vector<int64_t>& model_shape) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {  // the parser's exceptions end here
    return es::Status::InvalidArgument(name + ": " + e.what());
  }
  std::vector<int64_t> shape;
  std::vector<double> values;
  if (es::Status s = FlattenJson(j, 0, &shape, &values); !s.ok()) {
    return es::Status(s.code(), name + ": " + s.message());
  }
  if (shape.size() == 1) shape.clear();  // flat: the model's shape decides
  return FromNumbers(values, shape, datatype, model_shape, name);
}

}  // namespace

double ElementAsDouble(const std::string& datatype, const std::string& bytes, size_t i) {
  auto get = [&](auto zero) {
    decltype(zero) v;
    std::memcpy(&v, bytes.data() + i * sizeof(v), sizeof(v));
    return static_cast<double>(v);
  };
  if (datatype == "FP32") return get(float{});
  if (datatype == "FP64") return get(double{});
  if (datatype == "INT64") return get(int64_t{});
  if (datatype == "INT32") return get(int32_t{});
  if (datatype == "INT16") return get(int16_t{});
  if (datatype == "INT8") return get(int8_t{});
  if (datatype == "UINT64") return get(uint64_t{});
  if (datatype == "UINT32") return get(uint32_t{});
  if (datatype == "UINT16") return get(uint16_t{});
  if (datatype == "UINT8" || datatype == "BOOL") return get(uint8_t{});
  return 0;
}

es::StatusOr<NpyArray> ReadNpy(const std::string& path) {
  ES_ASSIGN_OR_RETURN(const std::string data, ReadFile(path));
  return ParseNpy(data, path);
}

es::StatusOr<NpyArray> ParseNpy(const std::string& data, const std::string& name) {
  auto bad = [&](const std::string& why) {
    return es::Status::InvalidArgument(name + ": not a usable .npy file: " + why);
  };
  if (data.size() < 10 || data.compare(0, 6, "\x93NUMPY") != 0) return bad("no NUMPY magic");
  const int major = static_cast<unsigned char>(data[6]);
  size_t header_len = 0, offset = 0;
  if (major == 1) {
    header_len = static_cast<unsigned char>(data[8]) | (static_cast<unsigned char>(data[9]) << 8);
    offset = 10;
  } else if (major == 2 || major == 3) {
    if (data.size() < 12) return bad("truncated header");
    for (int k = 3; k >= 0; --k) header_len = (header_len << 8) | static_cast<unsigned char>(data[8 + static_cast<size_t>(k)]);
    offset = 12;
  } else {
    return bad("version " + std::to_string(major));
  }
  if (offset + header_len > data.size()) return bad("truncated header");
  const std::string header = data.substr(offset, header_len);
  auto value_of = [&](const std::string& key) -> std::string {
    const auto k = header.find("'" + key + "'");
    if (k == std::string::npos) return "";
    const auto colon = header.find(':', k);
    if (colon == std::string::npos) return "";
    size_t start = header.find_first_not_of(' ', colon + 1);
    if (start == std::string::npos) return "";
    if (header[start] == '\'') {
      const auto end = header.find('\'', start + 1);
      return end == std::string::npos ? "" : header.substr(start + 1, end - start - 1);
    }
    if (header[start] == '(') {
      const auto end = header.find(')', start);
      return end == std::string::npos ? "" : header.substr(start, end - start + 1);
    }
    const auto end = header.find_first_of(",}", start);
    return header.substr(start, end == std::string::npos ? std::string::npos : end - start);
  };
  NpyArray a;
  a.descr = value_of("descr");
  if (value_of("fortran_order") != "False") return bad("Fortran order (save it C-ordered)");
  std::string shape = value_of("shape");
  if (shape.size() < 2) return bad("no shape");
  std::stringstream dims(shape.substr(1, shape.size() - 2));
  std::string dim;
  while (std::getline(dims, dim, ',')) {
    const size_t first = dim.find_first_not_of(' ');
    if (first == std::string::npos) continue;
    const size_t last = dim.find_last_not_of(' ');
    // from_chars, not stoll: no exception, no sign or junk accepted.
    int64_t value = -1;
    const char* begin = dim.data() + first;
    const char* end = dim.data() + last + 1;
    const auto [ptr, ec] = std::from_chars(begin, end, value);
    if (ec != std::errc() || ptr != end || value < 0) return bad("shape " + shape + " has a bad dimension");
    a.shape.push_back(value);
  }
  if (a.descr.size() < 3 || (a.descr[0] == '>' && a.descr.substr(2) != "1")) {
    return bad("dtype '" + a.descr + "' (little-endian numbers only)");
  }
  static const std::pair<const char*, const char*> kTypes[] = {
      {"f4", "FP32"},  {"f8", "FP64"},  {"i8", "INT64"},  {"i4", "INT32"},  {"i2", "INT16"}, {"i1", "INT8"},
      {"u8", "UINT64"}, {"u4", "UINT32"}, {"u2", "UINT16"}, {"u1", "UINT8"}, {"b1", "BOOL"}};
  std::string datatype;
  for (const auto& [code, type_name] : kTypes) {
    if (a.descr.substr(1) == code) datatype = type_name;
  }
  if (datatype.empty()) return bad("dtype '" + a.descr + "' is not supported");
  const size_t element = es::client::DatatypeSize(datatype);
  const std::optional<uint64_t> count = es::ElementCount(a.shape);
  const std::optional<uint64_t> bytes = es::TensorBytes(a.shape, element);
  if (!count || !bytes) return bad("shape " + ShapeText(a.shape) + " is too large");
  const std::string payload = data.substr(offset + header_len);
  if (payload.size() != *bytes) {
    return bad(std::to_string(payload.size()) + " data bytes, shape " + ShapeText(a.shape) + " needs " +
               std::to_string(*bytes));
  }
  a.values.resize(static_cast<size_t>(*count));
  for (size_t i = 0; i < a.values.size(); ++i) a.values[i] = ElementAsDouble(datatype, payload, i);
  return a;
}

es::Status WriteNpyFloat32(const std::string& path, const std::vector<int64_t>& shape,
                           const std::vector<float>& values) {
  std::string dims;
  for (int64_t d : shape) dims += std::to_string(d) + ", ";
  if (shape.size() > 1) dims.resize(dims.size() - 1);  // "(2, 3)"; a 1-tuple keeps its comma: "(2,)"
  if (shape.size() > 1) dims.resize(dims.size() - 1);
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + dims + "), }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string out = "\x93NUMPY";
  out += static_cast<char>(1);
  out += static_cast<char>(0);
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>((header.size() >> 8) & 0xff);
  out += header;
  out.append(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f || !(f << out) || !f.flush()) {
    const int err = errno;
    return FileError(err, path + ": cannot write");
  }
  return es::Status::Ok();
}

es::StatusOr<Tensor> LoadInput(const std::string& source, const std::string& datatype,
                               const std::vector<int64_t>& model_shape, int64_t batch, std::mt19937& rng) {
  if (es::client::DatatypeSize(datatype) == 0) {
    return es::Status::InvalidArgument("datatype " + datatype + " is not supported");
  }
  if (source == "random") return RandomInput(datatype, model_shape, batch, rng);
  if (source.rfind("raw:", 0) == 0) return RawInput(source.substr(4), datatype, model_shape);
  if (source.rfind("json:", 0) == 0) return JsonInput(source.substr(5), "json input", datatype, model_shape);
  if (EndsWith(source, ".json")) {
    ES_ASSIGN_OR_RETURN(const std::string text, ReadFile(source));
    return JsonInput(text, source, datatype, model_shape);
  }
  if (EndsWith(source, ".npy")) {
    ES_ASSIGN_OR_RETURN(const NpyArray a, ReadNpy(source));
    return FromNumbers(a.values, a.shape, datatype, model_shape, source);
  }
  return es::Status::InvalidArgument("'" + source + "': expected random, FILE.npy, FILE.json, json:[...] or raw:FILE");
}

}  // namespace es::cli
