// Internals of the HTTP infer codec (server/http/http_infer_codec.cc), in a
// header of their own to keep that file small: the streaming (SAX) reader of
// an infer request's JSON and the checks of "data" elements. Not an API:
// only http_infer_codec.cc (and its tests, through DecodeHttpInferRequest)
// use it.
//
// InferBodySax builds nlohmann's DOM of the request except for each input's
// "data", whose elements go straight into the tensor's bytes when the input's
// "datatype" came first, or into a compact list (16 bytes an element) to be
// checked once the datatype is known. Problems found in "data" are kept per
// input (InputData) and reported by the codec with the input's name, which
// may come after its data.
//
// Thread safety: one handler per parse; no shared state.
#pragma once

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/datatype.h"
#include "common/status.h"

namespace es::http_infer_sax {

using json = nlohmann::ordered_json;

// Deeper nesting than any tensor has; bounds the recursion on hostile input.
constexpr int kMaxNesting = 64;

// What a request's JSON may cost beyond its bytes. Every value outside
// "data" is a node of nlohmann's DOM (an empty object a map of its own, an
// input an InputData of about 230 bytes), some 30-80 bytes for each 3 of the
// body's ("{},"): a 8 MiB body of empty inputs took 1 GiB. No request needs
// more than a few hundred such values (names, shapes, parameters: "data"'s
// elements are not among them). Elements of a "data" that came before its
// "datatype" are held, 16 bytes each, until it is known (tritonclient sends
// the datatype first); past kMaxHeldElements the client is asked to.
constexpr size_t kMaxDomValues = size_t{1} << 16;
constexpr size_t kMaxHeldElements = size_t{1} << 20;

// The JSON value of one element, for messages (never longer than a line).
inline std::string Shown(const json& v) {
  // Only flat arrays are dumped (a shape): dump() recurses once per level.
  if (v.is_object()) return "{...}";
  if (v.is_array()) {
    for (const json& e : v) {
      if (e.is_structured()) return "[...]";
    }
  }
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 40) s = s.substr(0, 37) + "...";
  return s;
}

template <typename T>
inline void Append(std::string* out, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));  // the host is little-endian, as the wire format
  out->append(bytes, sizeof(T));
}

// One element of an input's "data" as the parser read it.
struct Element {
  enum class Kind : uint8_t { kBool, kInt, kUint, kFloat } kind;
  union {
    bool b;
    int64_t i;
    uint64_t u;
    double d;
  };
};

inline const char* KindName(const Element& e) {
  switch (e.kind) {
    case Element::Kind::kBool:
      return "a bool";
    case Element::Kind::kFloat:
      return "a non-integer number";
    default:
      return "an integer";
  }
}

inline std::string Shown(const Element& e) {
  switch (e.kind) {
    case Element::Kind::kBool:
      return e.b ? "true" : "false";
    case Element::Kind::kInt:
      return std::to_string(e.i);
    case Element::Kind::kUint:
      return std::to_string(e.u);
    default:
      return Shown(json(e.d));
  }
}

// The datatypes whose elements have a JSON form.
inline bool HasJsonForm(DataType type) {
  switch (type) {
    case DataType::kBool:
    case DataType::kUint8:
    case DataType::kInt8:
    case DataType::kInt16:
    case DataType::kInt32:
    case DataType::kInt64:
    case DataType::kFp32:
    case DataType::kFp64:
      return true;
    default:
      return false;
  }
}

// Checks elements against a datatype and appends their bytes. Messages name
// the element's index, not the input (the caller adds it).
class ElementWriter {
 public:
  ElementWriter(DataType type, std::string* out) : type_(type), out_(out) {}

  Status Add(const Element& e, uint64_t index) {
    switch (type_) {
      case DataType::kBool:
        if (e.kind != Element::Kind::kBool) return Bad(e, index, "true or false");
        out_->push_back(e.b ? 1 : 0);
        return Status::Ok();
      case DataType::kUint8:
        return AddInteger<uint8_t>(e, index);
      case DataType::kInt8:
        return AddInteger<int8_t>(e, index);
      case DataType::kInt16:
        return AddInteger<int16_t>(e, index);
      case DataType::kInt32:
        return AddInteger<int32_t>(e, index);
      case DataType::kInt64:
        return AddInteger<int64_t>(e, index);
      case DataType::kFp32: {
        if (e.kind == Element::Kind::kBool) return Bad(e, index, "numbers");
        const double d = AsDouble(e);
        if (std::isfinite(d) && std::fabs(d) > FLT_MAX) return OutOfRange(e, index, "(magnitude above 3.4e38)");
        Append<float>(out_, static_cast<float>(d));
        return Status::Ok();
      }
      case DataType::kFp64:
        if (e.kind == Element::Kind::kBool) return Bad(e, index, "numbers");
        Append<double>(out_, AsDouble(e));
        return Status::Ok();
      default:
        return NoJsonForm(type_);
    }
  }

  static Status NoJsonForm(DataType type) {
    return Status::InvalidArgument(std::string("datatype ") + DataTypeName(type) +
                                   " has no JSON form; send it as binary data (parameter binary_data_size)");
  }

 private:
  static double AsDouble(const Element& e) {
    switch (e.kind) {
      case Element::Kind::kInt:
        return static_cast<double>(e.i);
      case Element::Kind::kUint:
        return static_cast<double>(e.u);
      default:
        return e.d;
    }
  }
  Status Bad(const Element& e, uint64_t index, const char* wanted) const {
    return Status::InvalidArgument("element " + std::to_string(index) + " is " + KindName(e) + " (" + Shown(e) + "); " +
                                   DataTypeName(type_) + " elements must be " + wanted);
  }
  Status OutOfRange(const Element& e, uint64_t index, const std::string& range) const {
    return Status::InvalidArgument("element " + std::to_string(index) + " (" + Shown(e) + ") is out of range for " +
                                   DataTypeName(type_) + " " + range);
  }

  template <typename T>
  Status AddInteger(const Element& e, uint64_t index) {
    if (e.kind != Element::Kind::kInt && e.kind != Element::Kind::kUint) return Bad(e, index, "integers");
    constexpr auto lo = std::numeric_limits<T>::min();
    constexpr auto hi = std::numeric_limits<T>::max();
    if (e.kind == Element::Kind::kUint ? e.u > static_cast<uint64_t>(hi)
                                       : (e.i < static_cast<int64_t>(lo) || e.i > static_cast<int64_t>(hi))) {
      return OutOfRange(e, index, "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    }
    Append<T>(out_, e.kind == Element::Kind::kUint ? static_cast<T>(e.u) : static_cast<T>(e.i));
    return Status::Ok();
  }

  DataType type_;
  std::string* out_;
};

// What the parser kept of one input's "data" (the DOM never holds it).
struct InputData {
  bool present = false;
  std::optional<std::string> datatype;  // "datatype" when it came before "data"
  std::optional<DataType> direct;       // set: the elements were written into `raw` as this type while parsing
  std::string raw;
  std::vector<Element> held;  // otherwise the elements, checked once the datatype is known
  uint64_t count = 0;
  // The first problem, without the input's name: a message, or a value that
  // is never an element (its message needs the datatype, maybe not known yet).
  std::string error;
  struct NonElement {
    uint64_t index;
    std::string kind, shown;
  };
  std::optional<NonElement> non_element;
  bool failed() const { return !error.empty() || non_element.has_value(); }
};

// A SAX handler that builds the request's DOM (nlohmann's own DOM builder)
// except for each input's "data": its elements go straight into the tensor's
// bytes when the input's datatype came first (as tritonclient and most
// clients send it), otherwise into a compact list; so a large JSON tensor
// costs no DOM node per element.
class InferBodySax {
 public:
  using Dom = nlohmann::detail::json_sax_dom_parser<json>;

  explicit InferBodySax(json* root) : dom_(*root, /*allow_exceptions=*/true) {}
  std::vector<InputData>& inputs() { return inputs_; }

  bool null() {
    if (InData()) return DataOther("null", "null");
    if (!BeginValue()) return false;
    return dom_.null();
  }
  bool boolean(bool v) {
    if (InData()) return DataElement({Element::Kind::kBool, {.b = v}});
    if (!BeginValue()) return false;
    return dom_.boolean(v);
  }
  bool number_integer(int64_t v) {
    if (InData()) {
      Element e{Element::Kind::kInt, {}};
      e.i = v;
      return DataElement(e);
    }
    if (!BeginValue()) return false;
    return dom_.number_integer(v);
  }
  bool number_unsigned(uint64_t v) {
    if (InData()) {
      Element e{Element::Kind::kUint, {}};
      e.u = v;
      return DataElement(e);
    }
    if (!BeginValue()) return false;
    return dom_.number_unsigned(v);
  }
  bool number_float(double v, const std::string& text) {
    if (InData()) {
      Element e{Element::Kind::kFloat, {}};
      e.d = v;
      return DataElement(e);
    }
    if (!BeginValue()) return false;
    return dom_.number_float(v, text);
  }
  bool string(std::string& v) {
    if (InData()) return DataOther("a string", Shown(json(v)));
    if (!BeginValue()) return false;
    if (depth_ == 3 && in_input_object_ && input_key_ == "datatype") Current().datatype = v;
    return dom_.string(v);
  }
  bool binary(json::binary_t& v) {
    if (InData()) return DataOther("binary", "binary");
    if (!BeginValue()) return false;
    return dom_.binary(v);
  }
  bool start_object(size_t n) {
    if (InData()) {
      if (skip_ == 0) {
        object_is_data_ = pending_;
        NotAnElement("an object", "{...}");
      }
      ++skip_;  // skipped, with everything in it
      return true;
    }
    if (depth_ >= kMaxNesting) return TooDeep();
    if (!BeginValue()) return false;
    ++depth_;
    if (depth_ == 3 && in_inputs_) {
      in_input_object_ = true;
      input_key_.clear();
    }
    return dom_.start_object(n);
  }
  bool end_object() {
    if (skip_ > 0) {
      if (--skip_ == 0 && object_is_data_) {  // "data" itself was the object
        object_is_data_ = false;
        EndData();
      }
      return true;
    }
    if (depth_ == 3) in_input_object_ = false;
    --depth_;
    return dom_.end_object();
  }
  bool start_array(size_t n) {
    if (InData()) {
      if (skip_ > 0) {
        ++skip_;
      } else if (++data_depth_ > kMaxNesting && !current_.failed()) {
        current_.error = "\"data\" is nested deeper than " + std::to_string(kMaxNesting) + " arrays";
      }
      pending_ = false;
      return true;
    }
    if (depth_ >= kMaxNesting) return TooDeep();
    if (!BeginValue()) return false;
    ++depth_;
    if (depth_ == 2 && root_key_ == "inputs") {  // a second "inputs" replaces the first, in the DOM too
      in_inputs_ = true;
      inputs_.clear();
      input_index_ = -1;
    }
    return dom_.start_array(n);
  }
  bool end_array() {
    if (skip_ > 0) {
      --skip_;
      return true;
    }
    if (data_depth_ > 0) {
      if (--data_depth_ == 0) EndData();
      return true;
    }
    if (depth_ == 2) in_inputs_ = false;
    --depth_;
    return dom_.end_array();
  }
  bool key(std::string& k) {
    if (skip_ > 0) return true;
    if (depth_ == 1) root_key_ = k;
    if (depth_ == 3 && in_input_object_) {
      input_key_ = k;
      if (k == "data") return BeginData();  // not in the DOM
    }
    return dom_.key(k);
  }
  bool parse_error(size_t position, const std::string& last_token, const nlohmann::detail::exception& e) {
    return dom_.parse_error(position, last_token, e);  // throws
  }
  // The parse stopped at a structure nested deeper than kMaxNesting outside
  // "data" (the DOM, its copies and its dumps recurse once per level).
  bool too_deep() const { return too_deep_; }
  // The parse stopped at more than kMaxDomValues values outside "data".
  bool too_many_values() const { return too_many_values_; }

 private:
  bool TooDeep() {
    too_deep_ = true;
    return false;  // ends the parse
  }
  bool too_deep_ = false;
  bool too_many_values_ = false;

  bool InData() const { return pending_ || data_depth_ > 0 || skip_ > 0; }

  InputData& Current() { return inputs_[static_cast<size_t>(input_index_)]; }

  // A value starts outside any "data": count it, and the inputs; false (the
  // parse ends) past kMaxDomValues.
  bool BeginValue() {
    if (++dom_values_ > kMaxDomValues) {
      too_many_values_ = true;
      return false;
    }
    if (depth_ == 2 && in_inputs_) {
      ++input_index_;
      inputs_.resize(static_cast<size_t>(input_index_) + 1);
    }
    return true;
  }
  size_t dom_values_ = 0;
  size_t held_ = 0;  // elements held, every input's

  bool BeginData() {
    InputData& in = Current();
    current_ = InputData();
    current_.present = true;
    current_.datatype = in.datatype;
    if (in.datatype) {
      const std::optional<DataType> type = ParseDataType(*in.datatype);
      if (type && HasJsonForm(*type)) current_.direct = type;
    }
    writer_.emplace(current_.direct.value_or(DataType::kFp32), &current_.raw);
    pending_ = true;
    data_depth_ = 0;
    return true;
  }

  void EndData() {
    data_depth_ = -1;
    pending_ = false;
    writer_.reset();
    Current() = std::move(current_);
  }

  bool DataElement(const Element& e) {
    if (skip_ > 0) return true;
    const bool scalar = pending_;  // "data" is this one value
    pending_ = false;
    if (!current_.failed()) {
      if (current_.direct) {
        if (Status s = writer_->Add(e, current_.count); !s.ok()) current_.error = s.message();
      } else if (++held_ > kMaxHeldElements) {
        current_.error = "\"data\" came before \"datatype\", and the request holds more than " +
                         std::to_string(kMaxHeldElements) + " such elements: send \"datatype\" first";
      } else {
        current_.held.push_back(e);
      }
    }
    ++current_.count;
    if (scalar) EndData();
    return true;
  }

  // A value that is never an element: an error at its index, or for "data"
  // itself (pending_: "data" is this value).
  void NotAnElement(const char* kind, const std::string& shown) {
    if (pending_) {
      pending_ = false;
      if (!current_.failed()) current_.error = std::string("\"data\" is ") + kind + ", expected an array of elements";
      return;
    }
    if (!current_.failed()) current_.non_element = InputData::NonElement{current_.count, kind, shown};
    ++current_.count;
  }
  // A scalar that is never an element (null, a string).
  bool DataOther(const char* kind, const std::string& shown) {
    if (skip_ > 0) return true;
    const bool scalar = pending_;
    NotAnElement(kind, shown);
    if (scalar) EndData();
    return true;
  }

  Dom dom_;
  std::vector<InputData> inputs_;
  InputData current_;  // the "data" being read
  std::optional<ElementWriter> writer_;
  int depth_ = 0;           // containers in the DOM
  std::string root_key_;    // the last key of the top-level object
  bool in_inputs_ = false;  // the container at depth 2 is "inputs"
  int input_index_ = -1;
  bool in_input_object_ = false;  // the container at depth 3 is an input
  std::string input_key_;         // its last key
  bool pending_ = false;          // "data" read, its value not begun
  int data_depth_ = -1;           // arrays open inside "data"; -1: not in "data"
  int skip_ = 0;                  // containers open inside a skipped object
  bool object_is_data_ = false;   // the skipped object is "data" itself
};

}  // namespace es::http_infer_sax
