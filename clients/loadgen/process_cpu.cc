#include "clients/loadgen/process_cpu.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <filesystem>
#include <string>

namespace es::loadgen {
namespace {

// The whole of a small /proc file; nullopt if it cannot be opened or read.
std::optional<std::string> ReadProcFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string text;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      ::close(fd);
      return std::nullopt;
    }
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return text;
}

// The whitespace-separated tokens of `text`, in order.
std::vector<std::string_view> Tokens(std::string_view text) {
  std::vector<std::string_view> tokens;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && (text[i] == ' ' || text[i] == '\n' || text[i] == '\t')) ++i;
    const size_t start = i;
    while (i < text.size() && text[i] != ' ' && text[i] != '\n' && text[i] != '\t') ++i;
    if (i > start) tokens.push_back(text.substr(start, i - start));
  }
  return tokens;
}

template <typename Int>
std::optional<Int> ParseInt(std::string_view token) {
  Int value{};
  const auto [end, ec] = std::from_chars(token.data(), token.data() + token.size(), value);
  if (ec != std::errc() || end != token.data() + token.size()) return std::nullopt;
  return value;
}

std::string ProcPath(pid_t pid) { return "/proc/" + std::to_string(pid); }

}  // namespace

std::optional<double> ParseStatCpuSeconds(std::string_view stat, long ticks_per_second) {
  // "PID (COMM) STATE PPID ...": the comm may be "a) b", so the fields after
  // it start after the last ')'.
  const size_t open = stat.find('(');
  const size_t close = stat.rfind(')');
  if (ticks_per_second <= 0 || open == std::string_view::npos || close == std::string_view::npos || close < open) {
    return std::nullopt;
  }
  const std::vector<std::string_view> fields = Tokens(stat.substr(close + 1));
  // fields[0] is field 3 (state): utime (14) and stime (15) are fields[11] and fields[12].
  constexpr size_t kUtime = 14 - 3, kStime = 15 - 3;
  if (fields.size() <= kStime) return std::nullopt;
  const auto utime = ParseInt<uint64_t>(fields[kUtime]);
  const auto stime = ParseInt<uint64_t>(fields[kStime]);
  if (!utime || !stime) return std::nullopt;
  return static_cast<double>(*utime + *stime) / static_cast<double>(ticks_per_second);
}

std::optional<double> ReadCpuSeconds(pid_t pid) {
  if (pid <= 0) return std::nullopt;
  const auto stat = ReadProcFile(ProcPath(pid) + "/stat");
  if (!stat) return std::nullopt;
  return ParseStatCpuSeconds(*stat, ::sysconf(_SC_CLK_TCK));
}

std::vector<pid_t> ChildProcesses(pid_t pid) {
  std::vector<pid_t> children;
  if (pid <= 0) return children;
  // Each thread lists the children it forked; a thread that ends while we
  // read is simply not there (the error_code forms never throw).
  std::error_code ec;
  for (std::filesystem::directory_iterator it(ProcPath(pid) + "/task", ec), end; !ec && it != end;
       it.increment(ec)) {
    const auto text = ReadProcFile(it->path().string() + "/children");
    if (!text) continue;
    for (std::string_view token : Tokens(*text)) {
      if (const auto child = ParseInt<pid_t>(token); child && *child > 0) children.push_back(*child);
    }
  }
  std::sort(children.begin(), children.end());
  children.erase(std::unique(children.begin(), children.end()), children.end());
  return children;
}

double ProcessCpu::ChildrenSeconds() const {
  double sum = 0;
  for (const auto& [pid, seconds] : children_s) sum += seconds;
  return sum;
}

std::optional<ProcessCpu> ReadProcessCpu(pid_t pid) {
  const auto own = ReadCpuSeconds(pid);
  if (!own) return std::nullopt;
  ProcessCpu cpu;
  cpu.own_s = *own;
  for (pid_t child : ChildProcesses(pid)) {
    if (const auto seconds = ReadCpuSeconds(child)) cpu.children_s[child] = *seconds;  // gone since listed: skipped
  }
  return cpu;
}

double ChildrenCpuBetween(const ProcessCpu& a, const ProcessCpu& b) {
  double used = 0;
  for (const auto& [pid, seconds] : b.children_s) {
    const auto before = a.children_s.find(pid);
    used += before != a.children_s.end() && before->second <= seconds ? seconds - before->second : seconds;
  }
  return used;
}

}  // namespace es::loadgen
