#include "server/kserve/client_json.h"

namespace es {
namespace {

using json = nlohmann::json;

// nlohmann's own document builder, with the nesting and the values counted
// on the way: a value past either bound ends the parse (false). Not the
// parser's callback: its builder looks for discarded values in the parent
// array at every object's end, so an array of n objects took n^2 steps
// (65,536 empty objects: about 90 s of a core).
class BoundedDom {
 public:
  enum class Stop { kNone, kTooDeep, kTooMany };

  explicit BoundedDom(json* root) : dom_(*root, /*allow_exceptions=*/true) {}
  Stop stop() const { return stop_; }

  bool null() { return Value() && dom_.null(); }
  bool boolean(bool v) { return Value() && dom_.boolean(v); }
  bool number_integer(json::number_integer_t v) { return Value() && dom_.number_integer(v); }
  bool number_unsigned(json::number_unsigned_t v) { return Value() && dom_.number_unsigned(v); }
  bool number_float(json::number_float_t v, const json::string_t& text) {
    return Value() && dom_.number_float(v, text);
  }
  bool string(json::string_t& v) { return Value() && dom_.string(v); }
  bool binary(json::binary_t& v) { return Value() && dom_.binary(v); }
  bool start_object(size_t n) {
    if (!Value()) return false;
    ++depth_;
    return dom_.start_object(n);
  }
  bool key(json::string_t& k) { return dom_.key(k); }
  bool end_object() {
    --depth_;
    return dom_.end_object();
  }
  bool start_array(size_t n) {
    if (!Value()) return false;
    ++depth_;
    return dom_.start_array(n);
  }
  bool end_array() {
    --depth_;
    return dom_.end_array();
  }
  bool parse_error(size_t position, const std::string& last_token, const nlohmann::detail::exception& e) {
    return dom_.parse_error(position, last_token, e);  // throws
  }

 private:
  // A value starts `depth_` containers deep.
  bool Value() {
    if (depth_ > kMaxClientJsonNesting) {
      stop_ = Stop::kTooDeep;
      return false;
    }
    if (++values_ > kMaxClientJsonValues) {
      stop_ = Stop::kTooMany;
      return false;
    }
    return true;
  }

  nlohmann::detail::json_sax_dom_parser<json> dom_;
  int depth_ = 0;
  size_t values_ = 0;
  Stop stop_ = Stop::kNone;
};

}  // namespace

StatusOr<json> ParseClientJson(std::string_view text, const std::string& what) {
  json value;
  BoundedDom dom(&value);
  try {
    json::sax_parse(text, &dom);
  } catch (const json::exception& e) {
    return Status::InvalidArgument(what + " is not valid JSON: " + e.what());
  }
  switch (dom.stop()) {
    case BoundedDom::Stop::kTooDeep:
      return Status::InvalidArgument(what + " nests arrays and objects deeper than " +
                                     std::to_string(kMaxClientJsonNesting) + " levels");
    case BoundedDom::Stop::kTooMany:
      return Status::InvalidArgument(what + " holds more than " + std::to_string(kMaxClientJsonValues) + " values");
    case BoundedDom::Stop::kNone:
      break;
  }
  return value;
}

}  // namespace es
