// Helpers for the metrics tests: a plain HTTP GET (what a scraper
// does), a parser for the Prometheus text exposition format, and a real
// Prometheus server (Debian's /usr/bin/prometheus) started on loopback.
//
// Every network call here has a timeout; nothing may hang a test (the
// integration Watchdog ends the binary if something does anyway).
//
// Thread safety: free functions are thread-safe; a Scrape is a value; a
// PrometheusServer is used from one thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tests/common/temp_dir.h"

namespace es::metrics_test {

struct HttpResponse {
  int status = 0;     // HTTP status code; 0 when the request failed
  std::string body;
  std::string error;  // why it failed (connect, timeout...)
};

// GET http://`host_port``path` (host_port "127.0.0.1:PORT") with HTTP/1.0.
HttpResponse HttpGet(const std::string& host_port, const std::string& path,
                     std::chrono::milliseconds timeout = std::chrono::milliseconds(5000));

// Percent-encodes a query parameter value.
std::string UrlEncode(const std::string& value);

// A free TCP port on 127.0.0.1 (bound then released: good enough for tests).
int FreePort();

// One scrape of /metrics, parsed.
class Scrape {
 public:
  struct Sample {
    std::string name;
    std::map<std::string, std::string> labels;
    double value = 0;
  };
  struct Family {
    std::string type;  // from # TYPE
    std::string help;  // from # HELP
  };

  // Parses the text format; false (and *error) on a malformed line.
  static std::optional<Scrape> Parse(const std::string& text, std::string* error);
  // GETs /metrics from `host_port` and parses it; nullopt (and ADD_FAILURE) on error.
  static std::optional<Scrape> From(const std::string& host_port);

  // The value of the one sample named `name` whose labels include `labels`;
  // nullopt if there is none (or several).
  std::optional<double> Value(const std::string& name, const std::map<std::string, std::string>& labels = {}) const;
  // Sum over every sample named `name` whose labels include `labels` (0 if none).
  double Sum(const std::string& name, const std::map<std::string, std::string>& labels = {}) const;
  // Every sample named `name` whose labels include `labels`.
  std::vector<Sample> Find(const std::string& name, const std::map<std::string, std::string>& labels = {}) const;
  const std::map<std::string, Family>& families() const { return families_; }
  const std::string& text() const { return text_; }

 private:
  std::vector<Sample> samples_;
  std::map<std::string, Family> families_;
  std::string text_;
};

// A real Prometheus server scraping `target` (the router's metrics address)
// every second, with its data in a temp dir. The destructor stops it.
class PrometheusServer {
 public:
  static std::unique_ptr<PrometheusServer> Start(const std::string& target, std::string* error);
  ~PrometheusServer();

  const std::string& address() const { return address_; }  // "127.0.0.1:PORT"
  // GET /api/v1/query for an instant vector; the value of its only element,
  // or nullopt (with *error) when the query fails or returns nothing.
  std::optional<double> Query(const std::string& promql, std::string* error) const;
  // The number of series an instant query returns; nullopt (with *error)
  // when Prometheus rejects the query.
  std::optional<size_t> CountSeries(const std::string& promql, std::string* error) const;
  std::string LogTail() const;

 private:
  PrometheusServer() = default;

  std::unique_ptr<es::testing::TempDir> dir_;
  pid_t pid_ = -1;
  std::string address_;
};

}  // namespace es::metrics_test
