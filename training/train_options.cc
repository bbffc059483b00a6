#include "training/train_options.h"

#include <filesystem>

namespace es {
namespace {

bool ParseIndex(const std::string& text, int* out) {
  if (text.empty() || text.size() > 4) return false;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
  }
  *out = std::stoi(text);
  return true;
}

Status BadDevices(const std::string& devices, const std::string& why) {
  return Status::InvalidArgument("--devices '" + devices + "': " + why +
                                 " (expected cpu:N for N CPU ranks, or cuda:I,J,... for GPUs)");
}

}  // namespace

StatusOr<std::vector<std::string>> ParseDevices(const std::string& devices) {
  const size_t colon = devices.find(':');
  if (colon == std::string::npos) return BadDevices(devices, "no ':'");
  const std::string kind = devices.substr(0, colon);
  const std::string rest = devices.substr(colon + 1);
  std::vector<std::string> out;
  if (kind == "cpu") {
    int count = 0;
    if (!ParseIndex(rest, &count) || count < 1) return BadDevices(devices, "N must be >= 1");
    for (int i = 0; i < count; ++i) out.push_back("cpu:" + std::to_string(i));
    return out;
  }
  if (kind != "cuda") return BadDevices(devices, "unknown device kind '" + kind + "'");
  size_t begin = 0;
  while (begin <= rest.size()) {
    const size_t comma = std::min(rest.find(',', begin), rest.size());
    int index = 0;
    if (!ParseIndex(rest.substr(begin, comma - begin), &index)) {
      return BadDevices(devices, "bad GPU index '" + rest.substr(begin, comma - begin) + "'");
    }
    const std::string device = "cuda:" + std::to_string(index);
    for (const std::string& seen : out) {
      if (seen == device) return BadDevices(devices, device + " listed twice");
    }
    out.push_back(device);
    begin = comma + 1;
  }
  return out;
}

std::string CheckpointPath(const std::string& out) {
  return (std::filesystem::path(out) / ".checkpoints" / "latest.pt").string();
}

}  // namespace es
