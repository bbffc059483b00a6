// YAML reading with located errors: the one place in config/ that touches
// yaml-cpp. Internal to es_config (yaml-cpp is a private dependency).
//
// A Field is a YAML node together with where it came from: the file, the
// 1-based line and the field path ("hosts[1].device"). Every error made from
// a Field reads "<file>:<line>: <path>: <what>", which is the user-facing
// contract of every config error. The readers never throw: yaml-cpp's
// exceptions are caught here and turned into such errors.
//
// Thread safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "common/status.h"

namespace es::yaml {

struct Field {
  std::string file;  // the YAML file, as the user named it
  YAML::Node node;   // undefined when the key is absent
  std::string path;  // "" for the document root
  int line = 1;      // of the node, or of its parent when absent

  bool present() const { return node.IsDefined() && !node.IsNull(); }
};

// "<file>:<line>: <field>: <what>" (the "<field>: " part only when non-empty).
Status ErrorAt(const std::string& file, int line, const std::string& field,
               const std::string& what);
Status Error(const Field& field, const std::string& what);

// Parses `path`; a missing file or a syntax error is an error at its line.
StatusOr<Field> LoadFile(const std::string& path);
// Parses `text` (YAML or JSON), its errors naming `name` as the file.
StatusOr<Field> LoadText(const std::string& text, const std::string& name);

// The value under `key` of a mapping (absent: !present(), line of the map).
Field Child(const Field& map, std::string_view key);
// The elements of a sequence, paths "<path>[i]".
std::vector<Field> Items(const Field& sequence);

// Errors for any key not in `allowed` (naming it and listing the allowed
// ones), for duplicate keys, and when `map` is not a mapping.
Status CheckMap(const Field& map, std::initializer_list<std::string_view> allowed);
// Errors unless `field` is a sequence (an absent field is an empty one).
Status CheckSequence(const Field& field);

// Scalar readers: an error when the node is not a scalar of that type. They
// read present nodes; callers decide what an absent field means.
StatusOr<std::string> ReadString(const Field& field);
StatusOr<int64_t> ReadInt(const Field& field);
StatusOr<double> ReadDouble(const Field& field);

// Reads map.key into *out when present (leaves the default otherwise) and
// checks min <= value <= max.
Status ReadOptionalInt(const Field& map, std::string_view key, int64_t min, int64_t max,
                       int64_t* out);
Status ReadOptionalInt(const Field& map, std::string_view key, int min, int max, int* out);
Status ReadOptionalDouble(const Field& map, std::string_view key, double min, double max,
                          double* out);
Status ReadOptionalString(const Field& map, std::string_view key, std::string* out);
// "true"/"false" only (YAML 1.2 core; yes/no/on/off are refused: they read as
// strings elsewhere and a typo should not silently mean false).
Status ReadOptionalBool(const Field& map, std::string_view key, bool* out);
// As above but absent is an error; empty strings are errors too.
Status ReadRequiredString(const Field& map, std::string_view key, std::string* out);

}  // namespace es::yaml
