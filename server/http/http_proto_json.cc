#include "server/http/http_proto_json.h"

#include <google/protobuf/descriptor.h>

namespace es {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;
using json = nlohmann::ordered_json;

json Scalar(const Message& m, const Reflection& r, const FieldDescriptor* f, int index, bool all_messages) {
  const bool rep = index >= 0;
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      return rep ? r.GetRepeatedInt32(m, f, index) : r.GetInt32(m, f);
    case FieldDescriptor::CPPTYPE_INT64:
      return rep ? r.GetRepeatedInt64(m, f, index) : r.GetInt64(m, f);
    case FieldDescriptor::CPPTYPE_UINT32:
      return rep ? r.GetRepeatedUInt32(m, f, index) : r.GetUInt32(m, f);
    case FieldDescriptor::CPPTYPE_UINT64:
      return rep ? r.GetRepeatedUInt64(m, f, index) : r.GetUInt64(m, f);
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return rep ? r.GetRepeatedDouble(m, f, index) : r.GetDouble(m, f);
    case FieldDescriptor::CPPTYPE_FLOAT:
      return rep ? r.GetRepeatedFloat(m, f, index) : r.GetFloat(m, f);
    case FieldDescriptor::CPPTYPE_BOOL:
      return rep ? r.GetRepeatedBool(m, f, index) : r.GetBool(m, f);
    case FieldDescriptor::CPPTYPE_ENUM: {
      const auto* value = rep ? r.GetRepeatedEnum(m, f, index) : r.GetEnum(m, f);
      return value->name();
    }
    case FieldDescriptor::CPPTYPE_STRING:
      return rep ? r.GetRepeatedString(m, f, index) : r.GetString(m, f);
    case FieldDescriptor::CPPTYPE_MESSAGE:
      return ProtoToJson(rep ? r.GetRepeatedMessage(m, f, index) : r.GetMessage(m, f), all_messages);
  }
  return nullptr;
}

// A map key (always a scalar) as the JSON object's key.
std::string MapKey(const Message& entry) {
  const FieldDescriptor* key = entry.GetDescriptor()->map_key();
  const json k = Scalar(entry, *entry.GetReflection(), key, -1, false);
  return k.is_string() ? k.get<std::string>() : k.dump();
}

}  // namespace

json ProtoToJson(const Message& message, bool all_messages) {
  json out = json::object();
  const auto* descriptor = message.GetDescriptor();
  const Reflection& r = *message.GetReflection();
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const FieldDescriptor* f = descriptor->field(i);
    if (f->is_map()) {
      json map = json::object();
      for (int j = 0; j < r.FieldSize(message, f); ++j) {
        const Message& entry = r.GetRepeatedMessage(message, f, j);
        map[MapKey(entry)] =
            Scalar(entry, *entry.GetReflection(), entry.GetDescriptor()->map_value(), -1, all_messages);
      }
      out[f->name()] = std::move(map);
    } else if (f->is_repeated()) {
      json array = json::array();
      for (int j = 0; j < r.FieldSize(message, f); ++j) array.push_back(Scalar(message, r, f, j, all_messages));
      out[f->name()] = std::move(array);
    } else if (f->containing_oneof() != nullptr ||
               (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE ? !all_messages : f->has_presence())) {
      if (r.HasField(message, f)) out[f->name()] = Scalar(message, r, f, -1, all_messages);
    } else {
      out[f->name()] = Scalar(message, r, f, -1, all_messages);
    }
  }
  return out;
}

std::string JsonText(const json& value) { return value.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace es
