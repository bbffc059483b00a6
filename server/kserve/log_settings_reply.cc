#include "server/kserve/log_settings_reply.h"

#include <map>
#include <string>

namespace es {
namespace {

using Value = inference::LogSettingsRequest::SettingValue;

const char* TypeName(const Value& v) {
  switch (v.parameter_choice_case()) {
    case Value::kBoolParam:
      return "a bool";
    case Value::kUint32Param:
      return "a number";
    case Value::kStringParam:
      return "a string";
    case Value::PARAMETER_CHOICE_NOT_SET:
      break;
  }
  return "no value";
}

Status WrongType(const std::string& name, const Value& v, const char* expected) {
  return Status::InvalidArgument("log setting '" + name + "' takes " + expected + ", not " + TypeName(v));
}

}  // namespace

StatusOr<LogSettings> UpdatedLogSettings(const LogSettings& settings, const inference::LogSettingsRequest& req) {
  LogSettings out = settings;
  // In name order, so the first error named is the same on every call.
  const std::map<std::string, Value> updates(req.settings().begin(), req.settings().end());
  for (const auto& [name, v] : updates) {
    bool* flag = name == "log_info"      ? &out.info
                 : name == "log_warning" ? &out.warning
                 : name == "log_error"   ? &out.error
                                         : nullptr;
    if (flag != nullptr) {
      if (v.parameter_choice_case() != Value::kBoolParam) return WrongType(name, v, "a bool (true or false)");
      *flag = v.bool_param();
    } else if (name == "log_verbose_level") {
      if (v.parameter_choice_case() != Value::kUint32Param) return WrongType(name, v, "a number (0 or more)");
      out.verbose_level = v.uint32_param();
    } else if (name == "log_format") {
      if (v.parameter_choice_case() != Value::kStringParam) return WrongType(name, v, "a string");
      StatusOr<LogFormat> format = ParseLogFormat(v.string_param());
      if (!format.ok()) return Status::InvalidArgument("log setting 'log_format': " + format.status().message());
      out.format = *format;
    } else if (name == "log_file") {
      // Unchanged is not a change (a client may send back what it read).
      if (v.parameter_choice_case() == Value::kStringParam && v.string_param() == settings.file) continue;
      return Status::InvalidArgument(
          "log setting 'log_file' is set when the server starts (--log-file, or log_file in the server config); "
          "changing it at run time would let a caller choose a file the server writes");
    } else {
      return Status::InvalidArgument("unknown log setting '" + name +
                                     "' (log_file, log_info, log_warning, log_error, log_verbose_level, log_format)");
    }
  }
  return out;
}

void LogSettingsReply::Answer(const LogSettings& s, inference::LogSettingsResponse* resp) {
  auto& out = *resp->mutable_settings();
  out["log_file"].set_string_param(s.file);
  out["log_info"].set_bool_param(s.info);
  out["log_warning"].set_bool_param(s.warning);
  out["log_error"].set_bool_param(s.error);
  out["log_verbose_level"].set_uint32_param(s.verbose_level);
  out["log_format"].set_string_param(LogFormatName(s.format));
}

Status LogSettingsReply::Update(const inference::LogSettingsRequest& req, inference::LogSettingsResponse* resp) {
  MutexLock lock(&mu_);
  ES_ASSIGN_OR_RETURN(LogSettings settings, UpdatedLogSettings(CurrentLogSettings(), req));
  if (!req.settings().empty()) apply_(settings);
  Answer(CurrentLogSettings(), resp);
  return Status::Ok();
}

}  // namespace es
