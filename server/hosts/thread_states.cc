#include "server/hosts/thread_states.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <utility>
#include <vector>

namespace es {
namespace {

// A /proc file of one line: its first 511 bytes, without the newline; ""
// when it cannot be read.
std::string ReadProcLine(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  char buf[512];
  const ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) return "";
  std::string line(buf, static_cast<size_t>(n));
  if (!line.empty() && line.back() == '\n') line.pop_back();
  return line;
}

// The state letter of a /proc/PID/task/TID/stat line: the field after the
// command, which is in parentheses and may itself hold spaces and ')'.
char StateOf(const std::string& stat) {
  const size_t close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() ? stat[close + 2] : '?';
}

}  // namespace

std::string DescribeThreads(pid_t pid) {
  const std::string tasks = "/proc/" + std::to_string(pid) + "/task";
  DIR* dir = opendir(tasks.c_str());
  if (dir == nullptr) return "threads unreadable";
  std::vector<std::pair<std::string, int>> groups;  // "S futex_wait_queue" -> count, in order seen
  int threads = 0;
  while (const dirent* entry = readdir(dir)) {  // NOLINT(concurrency-mt-unsafe): this DIR is ours alone
    if (entry->d_name[0] == '.') continue;
    const std::string task = tasks + "/" + entry->d_name;
    const std::string stat = ReadProcLine(task + "/stat");
    if (stat.empty()) continue;  // the thread just exited
    std::string wchan = ReadProcLine(task + "/wchan");
    if (wchan == "0") wchan.clear();  // running or runnable: no wait channel
    std::string key(1, StateOf(stat));
    if (!wchan.empty()) key += " " + wchan;
    ++threads;
    auto it = groups.begin();
    while (it != groups.end() && it->first != key) ++it;
    if (it == groups.end()) {
      groups.emplace_back(key, 1);
    } else {
      ++it->second;
    }
  }
  closedir(dir);
  if (threads == 0) return "threads unreadable";
  std::string text = std::to_string(threads) + " thread" + (threads == 1 ? "" : "s") + ":";
  for (size_t i = 0; i < groups.size(); ++i) {
    text += (i == 0 ? " " : ", ") + groups[i].first + " x" + std::to_string(groups[i].second);
  }
  return text;
}

}  // namespace es
