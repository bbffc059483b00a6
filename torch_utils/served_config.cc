#include "torch_utils/served_config.h"

#include <cerrno>
#include <cstring>
#include <fstream>

#include "common/errno_text.h"

namespace es {
namespace {

// `packed_members` > 0: the output has the packed axis before the classes.
std::string TensorsYaml(int64_t max_batch_size, int64_t packed_members = 0) {
  // Appended piece by piece: gcc 12 warns (-Wrestrict, wrongly) on "[" + to_string(n) + ...
  std::string dims = "[";
  if (packed_members > 0) dims.append(std::to_string(packed_members)).append(", ");
  dims += "10]";
  return "max_batch_size: " + std::to_string(max_batch_size) +
         "\n"
         "inputs:\n"
         "  - {name: input, datatype: FP32, dims: [1, 28, 28]}\n"
         "outputs:\n"
         "  - {name: probabilities, datatype: FP32, dims: " + dims + "}\n";
}

std::string JoinNames(const std::vector<std::string>& names) {
  std::string text;
  for (const std::string& name : names) text += (text.empty() ? "" : ", ") + name;
  return text;
}

// The system's reason for the last failed stream operation (the streams
// set errno on the way; 0 when they failed for a reason of their own).
std::string LastErrorText() { return errno != 0 ? ErrnoText(errno) : "unknown error"; }

}  // namespace

std::string ClassifierMemberYaml(int64_t max_batch_size, const std::vector<std::string>& hosts,
                                 int64_t packed_members) {
  std::string yaml = "platform: torchscript\n" + TensorsYaml(max_batch_size, packed_members);
  if (!hosts.empty()) yaml += "hosts: [" + JoinNames(hosts) + "]\n";
  return yaml;
}

std::string BatchWhatWaitsYaml() { return "dynamic_batching:\n  max_queue_delay_us: 0\n"; }

std::string ClassifierEnsembleYaml(int64_t max_batch_size, const std::vector<std::string>& members,
                                   const std::string& combine) {
  std::vector<EnsembleEntry> entries;
  entries.reserve(members.size());
  for (const std::string& member : members) entries.push_back({member});
  return ClassifierEnsembleYaml(max_batch_size, entries, combine);
}

std::string ClassifierEnsembleYaml(int64_t max_batch_size, const std::vector<EnsembleEntry>& entries,
                                   const std::string& combine) {
  std::string yaml = "platform: ensemble\n" + TensorsYaml(max_batch_size) +
                     "ensemble:\n"
                     "  combine: " + combine + "\n"
                     "  members:\n";
  for (const EnsembleEntry& entry : entries) {
    yaml += "    - {model: " + entry.model;
    if (!entry.packed.empty()) yaml += ", packed: [" + JoinNames(entry.packed) + "]";
    yaml += "}\n";
  }
  return yaml;
}

Status WriteTextFile(const std::string& path, const std::string& text) {
  errno = 0;  // so that LastErrorText() says this write's reason, not an older one
  std::ofstream out(path, std::ios::trunc);
  if (!out) return Status::Internal("cannot open " + path + " for writing: " + LastErrorText());
  out << text;
  out.close();
  if (!out) return Status::Internal("cannot write " + path + ": " + LastErrorText());
  return Status::Ok();
}

}  // namespace es
