#include "server/kserve/client_json.h"

namespace es {
namespace {

// Thrown from the parser's callback to stop at the first level too deep:
// returning false would only drop that value and parse on.
struct TooDeep {};

}  // namespace

StatusOr<nlohmann::json> ParseClientJson(std::string_view text, const std::string& what) {
  using json = nlohmann::json;
  // `depth` is how many arrays and objects enclose the event's value.
  const json::parser_callback_t bound = [](int depth, json::parse_event_t, json&) {
    if (depth > kMaxClientJsonNesting) throw TooDeep{};
    return true;
  };
  try {
    return json::parse(text, bound);
  } catch (const TooDeep&) {
    return Status::InvalidArgument(what + " nests arrays and objects deeper than " +
                                   std::to_string(kMaxClientJsonNesting) + " levels");
  } catch (const json::exception& e) {
    return Status::InvalidArgument(what + " is not valid JSON: " + e.what());
  }
}

}  // namespace es
