#include "tests/integration/metrics/metrics_support.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "tests/integration/server_process.h"

#ifndef ES_PROMETHEUS_BIN
#define ES_PROMETHEUS_BIN "/usr/bin/prometheus"
#endif

namespace es::metrics_test {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

bool SplitHostPort(const std::string& host_port, std::string* host, int* port) {
  const size_t colon = host_port.rfind(':');
  if (colon == std::string::npos) return false;
  *host = host_port.substr(0, colon);
  *port = std::atoi(host_port.c_str() + colon + 1);
  return *port > 0;
}

// Waits until `fd` is ready for `events` or the deadline passes.
bool WaitFd(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, events, 0};
    const int r = poll(&p, 1, static_cast<int>(left));
    if (r > 0) return true;
    if (r < 0 && errno != EINTR) return false;
  }
}

HttpResponse Fail(HttpResponse r, const std::string& why) {
  r.status = 0;
  r.error = why;
  return r;
}

// Parses `{a="x",b="y"}` starting at text[*pos] == '{'; leaves *pos after '}'.
bool ParseLabels(const std::string& text, size_t* pos, std::map<std::string, std::string>* labels) {
  size_t i = *pos + 1;
  while (i < text.size() && text[i] != '}') {
    const size_t eq = text.find('=', i);
    if (eq == std::string::npos || eq + 1 >= text.size() || text[eq + 1] != '"') return false;
    std::string name = text.substr(i, eq - i);
    std::string value;
    size_t j = eq + 2;
    for (; j < text.size() && text[j] != '"'; ++j) {
      if (text[j] == '\\' && j + 1 < text.size()) {
        ++j;
        value += text[j] == 'n' ? '\n' : text[j];
      } else {
        value += text[j];
      }
    }
    if (j >= text.size()) return false;
    (*labels)[name] = value;
    i = j + 1;
    if (i < text.size() && text[i] == ',') ++i;
  }
  if (i >= text.size()) return false;
  *pos = i + 1;
  return true;
}

bool Includes(const std::map<std::string, std::string>& have, const std::map<std::string, std::string>& want) {
  for (const auto& [k, v] : want) {
    auto it = have.find(k);
    if (it == have.end() || it->second != v) return false;
  }
  return true;
}

}  // namespace

HttpResponse HttpGet(const std::string& host_port, const std::string& path, milliseconds timeout) {
  HttpResponse r;
  std::string host;
  int port = 0;
  if (!SplitHostPort(host_port, &host, &port)) return Fail(r, "bad address '" + host_port + "'");
  const auto deadline = Clock::now() + timeout;
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return Fail(r, std::string("socket: ") + std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{fd};
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) return Fail(r, "not an IPv4 address: " + host);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 && errno != EINPROGRESS) {
    return Fail(r, "connect " + host_port + ": " + std::strerror(errno));
  }
  if (!WaitFd(fd, POLLOUT, deadline)) return Fail(r, "connect " + host_port + ": timed out");
  int so_error = 0;
  socklen_t len = sizeof(so_error);
  getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_error, &len);
  if (so_error != 0) return Fail(r, "connect " + host_port + ": " + std::strerror(so_error));
  const std::string request = "GET " + path + " HTTP/1.0\r\nHost: " + host_port + "\r\nConnection: close\r\n\r\n";
  size_t sent = 0;
  while (sent < request.size()) {
    if (!WaitFd(fd, POLLOUT, deadline)) return Fail(r, "send: timed out");
    const ssize_t n = send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno != EAGAIN && errno != EINTR) return Fail(r, std::string("send: ") + std::strerror(errno));
    if (n > 0) sent += static_cast<size_t>(n);
  }
  std::string raw;
  char buf[16384];
  for (;;) {
    if (!WaitFd(fd, POLLIN, deadline)) return Fail(r, "GET " + path + " from " + host_port + ": timed out");
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      return Fail(r, std::string("recv: ") + std::strerror(errno));
    }
    raw.append(buf, static_cast<size_t>(n));
  }
  const size_t header_end = raw.find("\r\n\r\n");
  if (raw.compare(0, 5, "HTTP/") != 0 || header_end == std::string::npos) {
    return Fail(r, "not an HTTP response: '" + raw.substr(0, 200) + "'");
  }
  r.status = std::atoi(raw.c_str() + raw.find(' ') + 1);
  r.body = raw.substr(header_end + 4);
  return r;
}

std::string UrlEncode(const std::string& value) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : value) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  int port = 0;
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

// ---- Scrape -----------------------------------------------------------------

std::optional<Scrape> Scrape::Parse(const std::string& text, std::string* error) {
  Scrape scrape;
  scrape.text_ = text;
  std::istringstream in(text);
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.empty()) continue;
    if (line[0] == '#') {
      std::istringstream words(line);
      std::string hash, kind, name;
      words >> hash >> kind >> name;
      std::string rest;
      std::getline(words, rest);
      if (!rest.empty() && rest[0] == ' ') rest.erase(0, 1);
      if (kind == "TYPE") scrape.families_[name].type = rest;
      if (kind == "HELP") scrape.families_[name].help = rest;
      continue;
    }
    Sample s;
    size_t pos = line.find_first_of("{ ");
    if (pos == std::string::npos) {
      *error = "line " + std::to_string(number) + ": no value: '" + line + "'";
      return std::nullopt;
    }
    s.name = line.substr(0, pos);
    if (line[pos] == '{' && !ParseLabels(line, &pos, &s.labels)) {
      *error = "line " + std::to_string(number) + ": bad labels: '" + line + "'";
      return std::nullopt;
    }
    std::string value = line.substr(pos);
    const size_t b = value.find_first_not_of(' ');
    value = b == std::string::npos ? "" : value.substr(b);
    value = value.substr(0, value.find(' '));  // an optional timestamp follows
    if (value == "Nan" || value == "NaN") {
      s.value = std::nan("");
    } else if (value == "+Inf") {
      s.value = INFINITY;
    } else {
      char* end = nullptr;
      s.value = std::strtod(value.c_str(), &end);
      if (value.empty() || *end != '\0') {
        *error = "line " + std::to_string(number) + ": bad value: '" + line + "'";
        return std::nullopt;
      }
    }
    scrape.samples_.push_back(std::move(s));
  }
  return scrape;
}

std::optional<Scrape> Scrape::From(const std::string& host_port) {
  const HttpResponse r = HttpGet(host_port, "/metrics");
  if (r.status != 200) {
    ADD_FAILURE() << "GET http://" << host_port << "/metrics: "
                  << (r.status == 0 ? r.error : "HTTP " + std::to_string(r.status));
    return std::nullopt;
  }
  std::string error;
  auto scrape = Parse(r.body, &error);
  if (!scrape) ADD_FAILURE() << "/metrics does not parse: " << error;
  return scrape;
}

std::vector<Scrape::Sample> Scrape::Find(const std::string& name, const std::map<std::string, std::string>& labels) const {
  std::vector<Sample> found;
  for (const auto& s : samples_) {
    if (s.name == name && Includes(s.labels, labels)) found.push_back(s);
  }
  return found;
}

std::optional<double> Scrape::Value(const std::string& name, const std::map<std::string, std::string>& labels) const {
  const auto found = Find(name, labels);
  if (found.size() != 1) return std::nullopt;
  return found[0].value;
}

double Scrape::Sum(const std::string& name, const std::map<std::string, std::string>& labels) const {
  double sum = 0;
  for (const auto& s : Find(name, labels)) sum += s.value;
  return sum;
}

// ---- PrometheusServer -------------------------------------------------------

std::unique_ptr<PrometheusServer> PrometheusServer::Start(const std::string& target, std::string* error) {
  std::unique_ptr<PrometheusServer> p(new PrometheusServer());
  p->dir_ = std::make_unique<es::testing::TempDir>("es_prometheus_");
  const auto dir = p->dir_->path();
  std::ostringstream yml;
  yml << "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
      << "scrape_configs:\n  - job_name: ensemble-serve\n    static_configs:\n"
      << "      - targets: ['" << target << "']\n";
  if (!es::it::WriteTextFile(dir / "prometheus.yml", yml.str())) {
    *error = "cannot write prometheus.yml";
    return nullptr;
  }
  const int port = FreePort();
  p->address_ = "127.0.0.1:" + std::to_string(port);
  std::vector<std::string> args = {ES_PROMETHEUS_BIN,
                                   "--config.file=" + (dir / "prometheus.yml").string(),
                                   "--storage.tsdb.path=" + (dir / "data").string(),
                                   "--web.listen-address=" + p->address_,
                                   "--log.level=warn"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const std::string log = (dir / "prometheus.log").string();
  const pid_t pid = fork();
  if (pid < 0) {
    *error = std::string("fork: ") + std::strerror(errno);
    return nullptr;
  }
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    execv(argv[0], argv.data());
    _exit(127);
  }
  setpgid(pid, pid);
  es::it::Watchdog::RegisterProcessGroup(pid);
  p->pid_ = pid;
  // Ready once its web API answers /-/ready with 200.
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  while (Clock::now() < deadline) {
    if (HttpGet(p->address_, "/-/ready", milliseconds(1000)).status == 200) return p;
    if (waitpid(pid, nullptr, WNOHANG) == pid) {
      p->pid_ = -1;
      *error = "prometheus exited during start-up:\n" + p->LogTail();
      return nullptr;
    }
    std::this_thread::sleep_for(milliseconds(100));
  }
  *error = "prometheus not ready within 30 s:\n" + p->LogTail();
  return nullptr;
}

PrometheusServer::~PrometheusServer() {
  if (pid_ > 0) {
    kill(-pid_, SIGTERM);
    const auto deadline = Clock::now() + std::chrono::seconds(5);
    while (waitpid(pid_, nullptr, WNOHANG) != pid_) {
      if (Clock::now() > deadline) {
        kill(-pid_, SIGKILL);
        waitpid(pid_, nullptr, 0);
        break;
      }
      std::this_thread::sleep_for(milliseconds(20));
    }
    es::it::Watchdog::UnregisterProcessGroup(pid_);
  }
}

std::string PrometheusServer::LogTail() const {
  const std::string log = es::it::ReadTextFile(dir_->path() / "prometheus.log");
  return log.size() <= 4000 ? log : log.substr(log.size() - 4000);
}

namespace {

// Runs an instant query against Prometheus's HTTP API; the `data.result`
// array, or nullopt with *error saying why.
std::optional<nlohmann::json> InstantQuery(const std::string& address, const std::string& promql,
                                           std::string* error) {
  const HttpResponse r = HttpGet(address, "/api/v1/query?query=" + UrlEncode(promql));
  if (r.status != 200) {
    *error = r.status == 0 ? r.error : "HTTP " + std::to_string(r.status) + ": " + r.body;
    return std::nullopt;
  }
  try {
    const auto json = nlohmann::json::parse(r.body);
    if (json.at("status") != "success") {
      *error = r.body;
      return std::nullopt;
    }
    return json.at("data").at("result");
  } catch (const std::exception& e) {
    *error = std::string("bad answer (") + e.what() + "): " + r.body;
    return std::nullopt;
  }
}

}  // namespace

std::optional<size_t> PrometheusServer::CountSeries(const std::string& promql, std::string* error) const {
  const auto result = InstantQuery(address_, promql, error);
  if (!result) return std::nullopt;
  return result->size();
}

std::optional<double> PrometheusServer::Query(const std::string& promql, std::string* error) const {
  const auto result = InstantQuery(address_, promql, error);
  if (!result) return std::nullopt;
  if (result->size() != 1) {
    *error = "expected one series, got " + std::to_string(result->size()) + ": " + result->dump();
    return std::nullopt;
  }
  try {
    return std::stod((*result)[0].at("value")[1].get<std::string>());
  } catch (const std::exception& e) {
    *error = std::string("bad answer (") + e.what() + "): " + result->dump();
    return std::nullopt;
  }
}

}  // namespace es::metrics_test
