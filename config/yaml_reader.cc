#include "config/yaml_reader.h"

#include <limits>
#include <set>
#include <sstream>

namespace es::yaml {
namespace {

// yaml-cpp marks are 0-based and -1 when unknown; fall back to the parent's.
int LineOf(const YAML::Node& node, int fallback) {
  if (!node.IsDefined()) return fallback;
  const YAML::Mark mark = node.Mark();
  return mark.line >= 0 ? mark.line + 1 : fallback;
}

std::string JoinPath(const std::string& parent, std::string_view key) {
  if (parent.empty()) return std::string(key);
  return parent + "." + std::string(key);
}

std::string Describe(const YAML::Node& node) {
  if (node.IsScalar()) return "'" + node.Scalar() + "'";
  if (node.IsSequence()) return "a sequence";
  if (node.IsMap()) return "a mapping";
  return "an empty value";
}

}  // namespace

Status ErrorAt(const std::string& file, int line, const std::string& field,
               const std::string& what) {
  std::string message = file + ":" + std::to_string(line) + ": ";
  if (!field.empty()) message += field + ": ";
  return Status::InvalidArgument(message + what);
}

Status Error(const Field& field, const std::string& what) {
  return ErrorAt(field.file, field.line, field.path, what);
}

StatusOr<Field> LoadFile(const std::string& path) {
  try {
    return Field{path, YAML::LoadFile(path), "", 1};
  } catch (const YAML::BadFile&) {
    return Status::InvalidArgument(path + ": cannot open the file");
  } catch (const YAML::Exception& e) {
    // Syntax errors carry the position of the offending token.
    const int line = e.mark.line >= 0 ? e.mark.line + 1 : 1;
    return ErrorAt(path, line, "", "YAML syntax error: " + e.msg);
  }
}

StatusOr<Field> LoadText(const std::string& text, const std::string& name) {
  try {
    return Field{name, YAML::Load(text), "", 1};
  } catch (const YAML::Exception& e) {
    const int line = e.mark.line >= 0 ? e.mark.line + 1 : 1;
    return ErrorAt(name, line, "", "YAML syntax error: " + e.msg);
  }
}

Field Child(const Field& map, std::string_view key) {
  if (map.node.IsMap()) {
    for (const auto& entry : map.node) {
      if (entry.first.IsScalar() && entry.first.Scalar() == key) {
        const int key_line = LineOf(entry.first, map.line);
        return Field{map.file, entry.second, JoinPath(map.path, key),
                     LineOf(entry.second, key_line)};
      }
    }
  }
  return Field{map.file, YAML::Node(YAML::NodeType::Undefined), JoinPath(map.path, key),
               map.line};
}

std::vector<Field> Items(const Field& sequence) {
  std::vector<Field> items;
  if (!sequence.node.IsSequence()) return items;
  size_t index = 0;
  for (const auto& element : sequence.node) {
    items.push_back(Field{sequence.file, element,
                          sequence.path + "[" + std::to_string(index) + "]",
                          LineOf(element, sequence.line)});
    ++index;
  }
  return items;
}

Status CheckMap(const Field& map, std::initializer_list<std::string_view> allowed) {
  if (!map.node.IsMap()) {
    return Error(map, "expected a mapping, got " + Describe(map.node));
  }
  std::string expected;
  for (std::string_view key : allowed) {
    expected += (expected.empty() ? "" : ", ") + std::string(key);
  }
  std::set<std::string> seen;
  for (const auto& entry : map.node) {
    const int line = LineOf(entry.first, map.line);
    if (!entry.first.IsScalar()) {
      return ErrorAt(map.file, line, map.path, "keys must be plain names");
    }
    const std::string& key = entry.first.Scalar();
    bool known = false;
    for (std::string_view candidate : allowed) known = known || candidate == key;
    // Unknown keys are errors so that a typo ("thread:") cannot silently
    // leave a default in place.
    if (!known) {
      return ErrorAt(map.file, line, JoinPath(map.path, key),
                     "unknown key '" + key + "' (expected one of: " + expected + ")");
    }
    if (!seen.insert(key).second) {
      return ErrorAt(map.file, line, JoinPath(map.path, key), "duplicate key '" + key + "'");
    }
  }
  return Status::Ok();
}

Status CheckSequence(const Field& field) {
  if (!field.present() || field.node.IsSequence()) return Status::Ok();
  return Error(field, "expected a sequence, got " + Describe(field.node));
}

StatusOr<std::string> ReadString(const Field& field) {
  if (!field.node.IsScalar()) return Error(field, "expected a string, got " + Describe(field.node));
  return field.node.Scalar();
}

StatusOr<int64_t> ReadInt(const Field& field) {
  if (field.node.IsScalar()) {
    try {
      return field.node.as<int64_t>();
    } catch (const YAML::Exception&) {
      // Falls through to the error below.
    }
  }
  return Error(field, "expected an integer, got " + Describe(field.node));
}

StatusOr<double> ReadDouble(const Field& field) {
  if (field.node.IsScalar()) {
    try {
      return field.node.as<double>();
    } catch (const YAML::Exception&) {
      // Falls through to the error below.
    }
  }
  return Error(field, "expected a number, got " + Describe(field.node));
}

Status ReadOptionalInt(const Field& map, std::string_view key, int64_t min, int64_t max,
                       int64_t* out) {
  const Field field = Child(map, key);
  if (!field.present()) return Status::Ok();
  ES_ASSIGN_OR_RETURN(int64_t value, ReadInt(field));
  if (value < min || value > max) {
    // An open upper bound reads better than a huge number; any real bound
    // (2^40 bytes, INT32_MAX ms) is stated, or the message would hide why a
    // large value was refused.
    std::string range = max == std::numeric_limits<int64_t>::max()
                            ? ">= " + std::to_string(min)
                            : "in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
    return Error(field, "value " + std::to_string(value) + " out of range (expected " + range +
                            ")");
  }
  *out = value;
  return Status::Ok();
}

Status ReadOptionalInt(const Field& map, std::string_view key, int min, int max, int* out) {
  int64_t value = *out;
  ES_RETURN_IF_ERROR(ReadOptionalInt(map, key, int64_t{min}, int64_t{max}, &value));
  *out = static_cast<int>(value);
  return Status::Ok();
}

Status ReadOptionalDouble(const Field& map, std::string_view key, double min, double max,
                          double* out) {
  const Field field = Child(map, key);
  if (!field.present()) return Status::Ok();
  ES_ASSIGN_OR_RETURN(double value, ReadDouble(field));
  if (!(value >= min && value <= max)) {  // also rejects NaN
    std::ostringstream what;
    what << "value " << value << " out of range (expected in [" << min << ", " << max << "])";
    return Error(field, what.str());
  }
  *out = value;
  return Status::Ok();
}

Status ReadOptionalString(const Field& map, std::string_view key, std::string* out) {
  const Field field = Child(map, key);
  if (!field.present()) return Status::Ok();
  ES_ASSIGN_OR_RETURN(std::string value, ReadString(field));
  if (value.empty()) return Error(field, "must not be empty");
  *out = std::move(value);
  return Status::Ok();
}

Status ReadRequiredString(const Field& map, std::string_view key, std::string* out) {
  const Field field = Child(map, key);
  if (!field.present()) return Error(field, "missing required field");
  return ReadOptionalString(map, key, out);
}

Status ReadOptionalBool(const Field& map, std::string_view key, bool* out) {
  const Field field = Child(map, key);
  if (!field.present()) return Status::Ok();
  if (field.node.IsScalar()) {
    const std::string& text = field.node.Scalar();
    if (text == "true" || text == "false") {
      *out = text == "true";
      return Status::Ok();
    }
  }
  return Error(field, "expected true or false");
}

}  // namespace es::yaml
