#include "clients/loadgen/report.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/errno_text.h"

namespace es::loadgen {
namespace {

// A step is "near the ceiling" at or above this fraction of the tool's ceiling.
constexpr double kNearCeiling = 0.8;

std::string Fmt(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

// A stage time for the table: "-" when the server reported none.
std::string Stage(double us) { return us < 0 ? "-" : Fmt("%.0f", us); }

std::string StepLabel(const StepResult& s) {
  return s.open_loop ? Fmt("%.6g", s.rate) : std::to_string(s.concurrency);
}

std::string ErrorsText(const std::map<std::string, uint64_t>& errors) {
  std::string text;
  for (const auto& [code, count] : errors) {
    if (!text.empty()) text += ";";
    text += code + "=" + std::to_string(count);
  }
  return text;
}

nlohmann::json OrNull(double v) { return v < 0 ? nlohmann::json(nullptr) : nlohmann::json(v); }

double Accuracy(const LabelCounts& c) { return c.rows == 0 ? -1 : static_cast<double>(c.correct) / static_cast<double>(c.rows); }

nlohmann::json LabelJson(const LabelCounts& c) {
  return {{"answers", c.answers}, {"rows", c.rows}, {"correct", c.correct}, {"accuracy", OrNull(Accuracy(c))}};
}

nlohmann::json StepJson(const StepResult& s) {
  nlohmann::json j;
  j["model"] = s.model;
  j["mode"] = s.open_loop ? "open" : "closed";
  if (s.open_loop) {
    j["rate"] = s.rate;
  } else {
    j["concurrency"] = s.concurrency;
  }
  j["windows"] = s.windows;
  j["merged_windows"] = s.merged_windows;
  j["stable"] = s.stable;
  j["window_throughput_rps"] = s.window_rps;
  j["seconds"] = s.seconds;
  j["sent"] = s.sent;
  j["ok"] = s.ok;
  j["failed"] = s.failed;
  j["skipped"] = s.skipped;
  j["hung"] = s.hung;
  j["unanswered"] = s.unanswered;
  j["errors"] = s.errors;
  j["soak"] = s.soak;
  j["lost_server"] = s.lost_server.empty() ? nlohmann::json(nullptr) : nlohmann::json(s.lost_server);
  j["throughput_rps"] = s.throughput_rps;
  j["rows_per_s"] = s.rows_per_s;
  j["send_rate_rps"] = s.send_rate;
  if (s.open_loop) j["mean_send_lag_us"] = s.mean_late_us;
  j["client_cpu_cores"] = s.client_cpu;
  // --server-pid: core-µs per successful request; null without it, or with the process gone.
  j["server_cpu_us_per_request"] = OrNull(s.server_cpu_us_per_request);
  j["hosts_cpu_us_per_request"] = OrNull(s.hosts_cpu_us_per_request);
  // --labels: the answers checked, in all and by their served_by parameter ("" when absent).
  if (s.checked) {
    j["labels"] = LabelJson(s.labelled);
    j["labels"]["unreadable"] = s.unreadable;
    nlohmann::json by = nlohmann::json::object();
    for (const auto& [rung, counts] : s.labelled_by_served_by) by[rung] = LabelJson(counts);
    j["labels"]["by_served_by"] = by;
    // By request (the set's order; the requests past the last answered one
    // left out): how often each was answered and its rows answered right,
    // so that another run's accuracy on the same rows can be set beside
    // this one's.
    nlohmann::json answers = nlohmann::json::array(), correct = nlohmann::json::array();
    for (const LabelCounts& counts : s.labelled_by_request) {
      answers.push_back(counts.answers);
      correct.push_back(counts.correct);
    }
    j["labels"]["by_request"] = {{"answers", std::move(answers)}, {"correct", std::move(correct)}};
  } else {
    j["labels"] = nullptr;
  }
  const auto& l = s.latency;
  j["latency_us"] = {{"count", l.count}, {"mean", l.mean_us}, {"min", l.min_us}, {"max", l.max_us},
                     {"p50", l.p50_us},  {"p90", l.p90_us},   {"p95", l.p95_us}, {"p99", l.p99_us},
                     {"p99_9", l.p999_us}};
  const auto& v = s.server;
  if (v.available) {
    j["server"] = {{"success", v.success},
                   {"fail", v.fail},
                   {"executions", v.executions},
                   {"inferences", v.inferences},
                   {"avg_batch", OrNull(v.avg_batch)},
                   {"success_us", OrNull(v.success_us)},
                   {"queue_us", OrNull(v.queue_us)},
                   {"compute_input_us", OrNull(v.compute_input_us)},
                   {"compute_infer_us", OrNull(v.compute_infer_us)},
                   {"compute_output_us", OrNull(v.compute_output_us)}};
  } else {
    j["server"] = nullptr;
  }
  // Every window, for cutting the run by time (wall clock: Unix seconds).
  nlohmann::json timeline = nlohmann::json::array();
  for (const auto& w : s.timeline) {
    nlohmann::json histogram = nlohmann::json::object();
    for (const auto& [bucket, count] : w.histogram) histogram[std::to_string(bucket)] = count;
    timeline.push_back({{"start_unix_s", w.start_unix_s},
                        {"seconds", w.seconds},
                        {"sent", w.sent},
                        {"ok", w.ok},
                        {"failed", w.failed},
                        {"hung", w.hung},
                        {"unanswered", w.unanswered},
                        {"errors", w.errors},
                        {"p50_us", w.p50_us},
                        {"p99_us", w.p99_us},
                        {"max_us", w.max_us},
                        {"histogram", histogram}});
  }
  j["timeline"] = timeline;
  return j;
}

// ---- SVG ----------------------------------------------------------------

// A "nice" tick step (1, 2 or 5 x 10^k) giving about `ticks` ticks over [0, max].
double NiceStep(double max, int ticks) {
  if (max <= 0) return 1;
  const double raw = max / ticks;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double f = raw / mag;
  return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * mag;
}

std::string Xml(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string TickLabel(double v, double step) {
  if (step >= 1) return Fmt("%.0f", v);
  const int decimals = static_cast<int>(std::ceil(-std::log10(step) - 1e-9));
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

}  // namespace

double PeakThroughput(const std::vector<StepResult>& steps) {
  double peak = 0;
  for (const auto& s : steps) peak = std::max(peak, s.throughput_rps);
  return peak;
}

// The --server-pid columns: CPU per request of the server and of its hosts.
constexpr const char* kServerCpuColumns = " | %10s %12s";

// The --labels column: the accuracy of the answers checked, in percent.
constexpr const char* kAccuracyColumn = " | %6s";

std::string TableHeader(bool open_loop, bool server_cpu, bool labelled) {
  char buf[400];
  std::snprintf(buf, sizeof buf, "%7s %9s %10s %8s %8s %8s %8s %9s %7s %4s %6s%s | %8s %7s %6s %7s %6s %5s",
                open_loop ? "rate" : "conc", "req/s", "rows/s", "p50_us", "p90_us", "p95_us", "p99_us", "p99.9_us",
                "errors", "win", "cl_cpu", open_loop ? "  sent/s  skipped" : "", "srv_us", "queue", "c_in", "c_infer", "c_out",
                "batch");
  std::string header = buf;
  if (server_cpu) {
    std::snprintf(buf, sizeof buf, kServerCpuColumns, "srv_cpu_us", "hosts_cpu_us");
    header += buf;
  }
  if (labelled) {
    std::snprintf(buf, sizeof buf, kAccuracyColumn, "acc%");
    header += buf;
  }
  return header;
}

std::string TableRow(const StepResult& s, bool server_cpu) {
  char buf[512];
  std::string open_cols;
  if (s.open_loop) {
    char o[64];
    std::snprintf(o, sizeof o, " %7.0f %8llu", s.send_rate, static_cast<unsigned long long>(s.skipped));
    open_cols = o;
  }
  const auto& v = s.server;
  // A soak keeps every window: "not stable" does not apply to it.
  const std::string win = std::to_string(s.windows) + (s.stable || s.soak ? "" : "*");
  std::snprintf(buf, sizeof buf, "%7s %9.1f %10.1f %8.0f %8.0f %8.0f %8.0f %9.0f %7llu %4s %6.2f%s | %8s %7s %6s %7s %6s %5s",
                StepLabel(s).c_str(), s.throughput_rps, s.rows_per_s, s.latency.p50_us, s.latency.p90_us,
                s.latency.p95_us, s.latency.p99_us, s.latency.p999_us, static_cast<unsigned long long>(s.failed),
                win.c_str(), s.client_cpu, open_cols.c_str(), Stage(v.success_us).c_str(), Stage(v.queue_us).c_str(),
                Stage(v.compute_input_us).c_str(), Stage(v.compute_infer_us).c_str(),
                Stage(v.compute_output_us).c_str(), v.avg_batch < 0 ? "-" : Fmt("%.1f", v.avg_batch).c_str());
  std::string row = buf;
  if (server_cpu) {
    std::snprintf(buf, sizeof buf, kServerCpuColumns, Stage(s.server_cpu_us_per_request).c_str(),
                  Stage(s.hosts_cpu_us_per_request).c_str());
    row += buf;
  }
  if (s.checked) {
    const double accuracy = Accuracy(s.labelled);
    std::snprintf(buf, sizeof buf, kAccuracyColumn, accuracy < 0 ? "-" : Fmt("%.2f", 100 * accuracy).c_str());
    row += buf;
  }
  return row;
}

// "accuracy at rate 50: 91.20% of 500 rows (by served_by: a 93.00% of 300, ...)", and the unreadable answers.
std::string LabelsText(const StepResult& s) {
  std::ostringstream out;
  auto figure = [](const LabelCounts& c) {
    return (c.rows == 0 ? std::string("-") : Fmt("%.2f", 100 * Accuracy(c)) + "%") + " of " + std::to_string(c.rows) +
           " rows";
  };
  out << "accuracy at " << (s.open_loop ? "rate " : "concurrency ") << StepLabel(s) << ": " << figure(s.labelled);
  if (s.labelled_by_served_by.size() > 1 || (s.labelled_by_served_by.size() == 1 && !s.labelled_by_served_by.begin()->first.empty())) {
    std::string by;
    for (const auto& [rung, counts] : s.labelled_by_served_by) {
      by += (by.empty() ? "" : "; ") + (rung.empty() ? std::string("(none)") : rung) + " " + figure(counts);
    }
    out << " (by served_by: " << by << ")";
  }
  if (s.unreadable > 0) out << "; " << s.unreadable << " answers without a readable output";
  out << "\n";
  return out.str();
}

std::string Summary(const Report& r) {
  std::ostringstream out;
  bool unstable = false;
  for (const auto& s : r.steps) {
    unstable = unstable || (!s.stable && !s.soak);
    if (!s.errors.empty()) out << "errors at " << (s.open_loop ? "rate " : "concurrency ") << StepLabel(s) << ": "
                               << ErrorsText(s.errors) << "\n";
    if (s.checked) out << LabelsText(s);
  }
  if (unstable) {
    out << "* not stable: the last " << r.stable_windows << " windows differed by more than "
        << Fmt("%.0f", r.stability * 100) << "% (figures are their merge; try a longer --duration-s)\n";
  }
  const double peak = PeakThroughput(r.steps);
  for (const auto& s : r.steps) {
    if (s.throughput_rps == peak && peak > 0) {
      out << "peak: " << Fmt("%.1f", peak) << " req/s (" << Fmt("%.1f", s.rows_per_s) << " rows/s) at "
          << (s.open_loop ? "rate " : "concurrency ") << StepLabel(s) << ", p50 " << Fmt("%.0f", s.latency.p50_us)
          << " us, p99 " << Fmt("%.0f", s.latency.p99_us) << " us; the tool itself used "
          << Fmt("%.2f", s.client_cpu) << " of " << std::thread::hardware_concurrency() << " CPU cores";
      if (s.server_cpu_us_per_request >= 0) {
        out << "; the server " << Fmt("%.0f", s.server_cpu_us_per_request) << " core-us per request, its hosts "
            << Fmt("%.0f", s.hosts_cpu_us_per_request);
      }
      out << "\n";
      break;
    }
  }
  if (r.ceiling) {
    const auto& c = *r.ceiling;
    out << "tool ceiling: " << Fmt("%.1f", c.throughput_rps) << " req/s on '" << c.model << "' at concurrency "
        << c.concurrency << " (p50 " << Fmt("%.0f", c.latency.p50_us) << " us, request " << r.ceiling_request_bytes
        << " B vs " << r.request_bytes << " B)";
    if (c.throughput_rps > 0) {
      const double share = peak / c.throughput_rps;
      out << "; the peak above is " << Fmt("%.0f", share * 100) << "% of it"
          << (share >= kNearCeiling ? ": LIMITED BY THE CLIENT/ROUTER PATH, not the model" : "");
    }
    out << "\n";
  } else if (r.ceiling_is_this_run) {
    out << "tool ceiling: this run is on the ceiling model '" << r.model << "': " << Fmt("%.1f", peak)
        << " req/s at best; a model measured near this figure measures the tool and the request path, not itself\n";
  } else {
    out << "tool ceiling: not measured ("
        << (r.ceiling_not_measured.empty() ? std::string("interrupted") : r.ceiling_not_measured) << ")\n";
  }
  out << "requests: " << r.client_ok << " ok, " << r.client_failed << " failed";
  if (!r.client_errors.empty()) out << " (" << ErrorsText(r.client_errors) << ")";
  out << ", " << r.client_hung << " hung (over " << r.hung_ms << " ms), " << r.client_unanswered
      << " unanswered (whole run, warm-ups included)";
  if (r.server_success_delta) {
    out << "; server counted " << *r.server_success_delta << " ok, " << r.server_fail_delta.value_or(0)
        << " failed for '" << r.model << "'";
  }
  out << "\n";
  for (const auto& [code, message] : r.client_error_messages) out << "first " << code << ": " << message << "\n";
  if (r.interrupted) out << "interrupted: the report holds the steps finished before it\n";
  if (!r.lost_server.empty()) {
    out << "lost the server: " << r.lost_server << "; the run stopped there (" << r.client_ok
        << " requests had succeeded)\n";
  }
  return out.str();
}

std::string CsvText(const Report& r) {
  std::ostringstream out;
  out << "model,mode,concurrency,rate,batch,windows,stable,seconds,sent,ok,failed,skipped,throughput_rps,rows_per_s,"
         "lat_mean_us,lat_min_us,lat_p50_us,lat_p90_us,lat_p95_us,lat_p99_us,lat_p99_9_us,lat_max_us,errors,client_cpu_cores,"
         "srv_success_us,srv_queue_us,srv_compute_input_us,srv_compute_infer_us,srv_compute_output_us,srv_avg_batch,"
         "srv_success,srv_fail,hung,unanswered,"
         // Appended last (--server-pid; empty without it) so that readers by position keep working.
         "server_cpu_us_per_request,hosts_cpu_us_per_request,"
         // --labels (empty without it).
         "accuracy\n";
  auto num = [](double v) { return v < 0 ? std::string() : Fmt("%.3f", v); };
  auto row = [&](const StepResult& s) {
    const auto& l = s.latency;
    const auto& v = s.server;
    out << s.model << "," << (s.open_loop ? "open" : "closed") << "," << (s.open_loop ? "" : std::to_string(s.concurrency))
        << "," << (s.open_loop ? Fmt("%.6g", s.rate) : "") << "," << r.batch << "," << s.windows << ","
        << (s.stable ? 1 : 0) << "," << Fmt("%.3f", s.seconds) << "," << s.sent << "," << s.ok << "," << s.failed << ","
        << s.skipped << "," << Fmt("%.3f", s.throughput_rps) << "," << Fmt("%.3f", s.rows_per_s) << ","
        << Fmt("%.3f", l.mean_us) << "," << Fmt("%.3f", l.min_us) << "," << Fmt("%.3f", l.p50_us) << ","
        << Fmt("%.3f", l.p90_us) << "," << Fmt("%.3f", l.p95_us) << "," << Fmt("%.3f", l.p99_us) << ","
        << Fmt("%.3f", l.p999_us) << "," << Fmt("%.3f", l.max_us) << "," << ErrorsText(s.errors) << ","
        << Fmt("%.3f", s.client_cpu) << ","
        << num(v.success_us) << "," << num(v.queue_us) << "," << num(v.compute_input_us) << ","
        << num(v.compute_infer_us) << "," << num(v.compute_output_us) << "," << num(v.avg_batch) << ","
        << (v.available ? std::to_string(v.success) : "") << "," << (v.available ? std::to_string(v.fail) : "") << ","
        << s.hung << "," << s.unanswered << "," << num(s.server_cpu_us_per_request) << ","
        << num(s.hosts_cpu_us_per_request) << "," << (s.checked ? num(Accuracy(s.labelled)) : "") << "\n";
  };
  for (const auto& s : r.steps) row(s);
  return out.str();
}

std::string JsonText(const Report& r) {
  nlohmann::json j;
  j["tool"] = "ensemble-loadgen";
  j["date"] = r.date;
  j["command"] = r.command;
  j["server"] = {{"address", r.server}, {"name", r.server_name}, {"version", r.server_version}};
  nlohmann::json inputs = nlohmann::json::array();
  for (const auto& in : r.inputs) {
    inputs.push_back({{"name", in.name}, {"datatype", in.datatype}, {"shape", in.shape}, {"bytes", in.bytes}});
  }
  j["model"] = {{"name", r.model}, {"version", r.model_version}, {"platform", r.platform}, {"inputs", inputs}};
  j["config"] = {{"mode", r.open_loop ? "open" : "closed"},
                 {"arrivals", r.open_loop ? (r.poisson ? "poisson" : "constant") : "closed-loop"},
                 {"batch", r.batch},
                 {"request_bytes", r.request_bytes},
                 {"data", r.data.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.data)},
                 {"channels", r.channels},
                 {"threads", r.threads},
                 {"timeout_ms", r.timeout_ms},
                 {"warmup_s", r.warmup_s},
                 {"duration_s", r.duration_s},
                 {"max_windows", r.max_windows},
                 {"stable_windows", r.stable_windows},
                 {"stability", r.stability},
                 {"hung_ms", r.hung_ms},
                 {"soak_s", r.soak_s},
                 {"requests", r.requests}};
  nlohmann::json steps = nlohmann::json::array();
  for (const auto& s : r.steps) steps.push_back(StepJson(s));
  j["steps"] = steps;
  j["peak_throughput_rps"] = PeakThroughput(r.steps);
  j["ceiling_is_this_run"] = r.ceiling_is_this_run;
  if (r.ceiling) {
    j["ceiling"] = StepJson(*r.ceiling);
    j["ceiling"]["request_bytes"] = r.ceiling_request_bytes;
  } else {
    j["ceiling"] = nullptr;
  }
  j["totals"] = {{"client_sent", r.client_sent},
                 {"client_ok", r.client_ok},
                 {"client_failed", r.client_failed},
                 {"client_errors", r.client_errors},
                 {"client_error_messages", r.client_error_messages},
                 {"client_hung", r.client_hung},
                 {"client_unanswered", r.client_unanswered},
                 {"server_success", r.server_success_delta ? nlohmann::json(*r.server_success_delta) : nlohmann::json()},
                 {"server_fail", r.server_fail_delta ? nlohmann::json(*r.server_fail_delta) : nlohmann::json()}};
  j["interrupted"] = r.interrupted;
  j["lost_server"] = r.lost_server.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.lost_server);
  // Replace, not throw, on text that is not UTF-8 (a server's error message).
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

namespace {

// The latency-vs-throughput chart's page, plot area and scales.
struct ChartFrame {
  static constexpr double kW = 820, kH = 520, kLeft = 80, kRight = 30, kTop = 70, kBottom = 70;
  static constexpr double kPlotW = kW - kLeft - kRight, kPlotH = kH - kTop - kBottom;
  double x_step = 1, y_step = 1, x_max = 1, y_max = 1;
  // The tool's ceiling is drawn when it lies near the measured throughputs.
  bool ceiling_on_chart = false;

  explicit ChartFrame(const Report& r) {
    double max_x = 0, max_y = 0;
    for (const auto& s : r.steps) {
      max_x = std::max(max_x, s.throughput_rps);
      max_y = std::max(max_y, s.latency.p99_us / 1000.0);
    }
    ceiling_on_chart = r.ceiling && r.ceiling->throughput_rps > 0 &&
                       r.ceiling->throughput_rps <= std::max(max_x, 1e-9) * 1.6;
    if (ceiling_on_chart) max_x = std::max(max_x, r.ceiling->throughput_rps);
    x_step = NiceStep(max_x * 1.05, 6);
    y_step = NiceStep(max_y * 1.05, 6);
    x_max = std::max(x_step, std::ceil(max_x * 1.05 / x_step) * x_step);
    y_max = std::max(y_step, std::ceil(max_y * 1.05 / y_step) * y_step);
  }
  double px(double x) const { return kLeft + x / x_max * kPlotW; }
  double py(double y) const { return kTop + kPlotH - y / y_max * kPlotH; }
};

// The page, the title and the subtitle (and the ceiling when off the chart).
void SvgHeader(const Report& r, const ChartFrame& f, std::ostringstream& o) {
  constexpr double kW = ChartFrame::kW, kH = ChartFrame::kH;
  o << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
    << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kW << "\" height=\"" << kH << "\" viewBox=\"0 0 " << kW
    << " " << kH << "\" font-family=\"DejaVu Sans, Arial, sans-serif\" font-size=\"12\">\n"
    << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  o << "<text x=\"" << kW / 2 << "\" y=\"24\" text-anchor=\"middle\" font-size=\"16\" font-weight=\"bold\">"
    << Xml(r.model) << ": latency vs throughput</text>\n";
  std::string subtitle = "batch " + std::to_string(r.batch) + ", " +
                         (r.open_loop ? std::string(r.poisson ? "open loop, Poisson arrivals" : "open loop, constant rate")
                                      : std::string("closed loop")) +
                         ", server " + r.server + ", " + r.date;
  o << "<text x=\"" << kW / 2 << "\" y=\"44\" text-anchor=\"middle\" fill=\"#444\">" << Xml(subtitle) << "</text>\n";
  if (r.ceiling && !f.ceiling_on_chart) {
    o << "<text x=\"" << kW / 2 << "\" y=\"60\" text-anchor=\"middle\" fill=\"#444\">tool ceiling "
      << Fmt("%.0f", r.ceiling->throughput_rps) << " req/s (" << Xml(r.ceiling->model) << "), off the chart</text>\n";
  }
}

// Grid, ticks with their labels, the axes and their titles.
void SvgAxes(const ChartFrame& f, std::ostringstream& o) {
  constexpr double kLeft = ChartFrame::kLeft, kTop = ChartFrame::kTop, kH = ChartFrame::kH;
  constexpr double plot_w = ChartFrame::kPlotW, plot_h = ChartFrame::kPlotH;
  o << "<g stroke=\"#ddd\" stroke-width=\"1\">\n";
  for (double x = f.x_step; x <= f.x_max + 1e-9; x += f.x_step) {
    o << "<line x1=\"" << f.px(x) << "\" y1=\"" << kTop << "\" x2=\"" << f.px(x) << "\" y2=\"" << kTop + plot_h << "\"/>\n";
  }
  for (double y = f.y_step; y <= f.y_max + 1e-9; y += f.y_step) {
    o << "<line x1=\"" << kLeft << "\" y1=\"" << f.py(y) << "\" x2=\"" << kLeft + plot_w << "\" y2=\"" << f.py(y)
      << "\"/>\n";
  }
  o << "</g>\n<g fill=\"#222\">\n";
  for (double x = 0; x <= f.x_max + 1e-9; x += f.x_step) {
    o << "<line x1=\"" << f.px(x) << "\" y1=\"" << kTop + plot_h << "\" x2=\"" << f.px(x) << "\" y2=\""
      << kTop + plot_h + 5 << "\" stroke=\"#222\"/>\n";
    o << "<text x=\"" << f.px(x) << "\" y=\"" << kTop + plot_h + 20 << "\" text-anchor=\"middle\">"
      << TickLabel(x, f.x_step) << "</text>\n";
  }
  for (double y = 0; y <= f.y_max + 1e-9; y += f.y_step) {
    o << "<line x1=\"" << kLeft - 5 << "\" y1=\"" << f.py(y) << "\" x2=\"" << kLeft << "\" y2=\"" << f.py(y)
      << "\" stroke=\"#222\"/>\n";
    o << "<text x=\"" << kLeft - 9 << "\" y=\"" << f.py(y) + 4 << "\" text-anchor=\"end\">" << TickLabel(y, f.y_step)
      << "</text>\n";
  }
  o << "</g>\n";
  o << "<line x1=\"" << kLeft << "\" y1=\"" << kTop + plot_h << "\" x2=\"" << kLeft + plot_w << "\" y2=\"" << kTop + plot_h
    << "\" stroke=\"#222\" stroke-width=\"1.5\"/>\n";
  o << "<line x1=\"" << kLeft << "\" y1=\"" << kTop << "\" x2=\"" << kLeft << "\" y2=\"" << kTop + plot_h
    << "\" stroke=\"#222\" stroke-width=\"1.5\"/>\n";
  o << "<text x=\"" << kLeft + plot_w / 2 << "\" y=\"" << kH - 22
    << "\" text-anchor=\"middle\" font-size=\"13\">throughput (successful requests/s)</text>\n";
  o << "<text x=\"22\" y=\"" << kTop + plot_h / 2 << "\" text-anchor=\"middle\" font-size=\"13\" transform=\"rotate(-90 22 "
    << kTop + plot_h / 2 << ")\">latency (ms)</text>\n";
}

// A step label's box, for leaving out labels that would overlap.
constexpr double kLabelWidth = 34, kLabelHeight = 11;

// The p50 and p99 curves, one point per step labelled with the step, and
// their legend.
void SvgCurves(const Report& r, const ChartFrame& f, std::ostringstream& o) {
  struct Curve {
    const char* name;
    const char* color;
    double LatencySummary::*field;
  };
  const Curve curves[] = {{"p50", "#1f77b4", &LatencySummary::p50_us}, {"p99", "#d62728", &LatencySummary::p99_us}};
  for (const auto& c : curves) {
    o << "<polyline fill=\"none\" stroke=\"" << c.color << "\" stroke-width=\"2\" points=\"";
    for (const auto& s : r.steps) {
      o << Fmt("%.1f", f.px(s.throughput_rps)) << "," << Fmt("%.1f", f.py(s.latency.*c.field / 1000.0)) << " ";
    }
    o << "\"/>\n";
    for (const auto& s : r.steps) {
      // A step whose windows never agreed within --stability is drawn
      // hollow: its figures are a mean over a moving target.
      const bool unstable = !s.stable && !s.soak;
      o << "<circle cx=\"" << Fmt("%.1f", f.px(s.throughput_rps)) << "\" cy=\""
        << Fmt("%.1f", f.py(s.latency.*c.field / 1000.0)) << "\" r=\"3.5\" fill=\"" << (unstable ? "white" : c.color)
        << "\" stroke=\"" << c.color << "\" stroke-width=\"1.5\"><title>" << (s.open_loop ? "rate " : "concurrency ")
        << StepLabel(s) << ": " << Fmt("%.1f", s.throughput_rps) << " req/s, " << c.name << " "
        << Fmt("%.3f", s.latency.*c.field / 1000.0) << " ms" << (unstable ? ", not stable" : "")
        << "</title></circle>\n";
    }
  }
  // Step labels by the p99 points; a label that would overlap one already
  // drawn is left out (its point's tooltip still names it).
  std::vector<std::pair<double, double>> drawn;
  for (const auto& s : r.steps) {
    const double x = f.px(s.throughput_rps) + 5, y = f.py(s.latency.p99_us / 1000.0) - 6;
    const bool overlaps = std::any_of(drawn.begin(), drawn.end(), [&](const auto& d) {
      return std::abs(d.first - x) < kLabelWidth && std::abs(d.second - y) < kLabelHeight;
    });
    if (overlaps) continue;
    drawn.emplace_back(x, y);
    o << "<text x=\"" << Fmt("%.1f", x) << "\" y=\"" << Fmt("%.1f", y) << "\" font-size=\"10\" fill=\"#555\">"
      << (s.open_loop ? "r=" : "c=") << StepLabel(s) << "</text>\n";
  }
  const bool any_unstable =
      std::any_of(r.steps.begin(), r.steps.end(), [](const StepResult& s) { return !s.stable && !s.soak; });
  const double lx = ChartFrame::kLeft + 14, ly = ChartFrame::kTop + 8;
  o << "<rect x=\"" << lx - 6 << "\" y=\"" << ly - 4 << "\" width=\"" << (any_unstable ? 112 : 92)
    << "\" height=\"" << (any_unstable ? 62 : 44) << "\" fill=\"white\" stroke=\"#bbb\"/>\n";
  if (any_unstable) {
    const double y = ly + 10 + 2 * 18;
    o << "<circle cx=\"" << lx + 13 << "\" cy=\"" << y << "\" r=\"3.5\" fill=\"white\" stroke=\"#555\" "
      << "stroke-width=\"1.5\"/>\n";
    o << "<text x=\"" << lx + 32 << "\" y=\"" << y + 4 << "\">not stable</text>\n";
  }
  for (size_t i = 0; i < 2; ++i) {
    const double y = ly + 10 + static_cast<double>(i) * 18;
    o << "<line x1=\"" << lx << "\" y1=\"" << y << "\" x2=\"" << lx + 26 << "\" y2=\"" << y << "\" stroke=\""
      << curves[i].color << "\" stroke-width=\"2\"/>\n";
    o << "<text x=\"" << lx + 32 << "\" y=\"" << y + 4 << "\">" << curves[i].name << " latency</text>\n";
  }
}

}  // namespace

std::string SvgText(const Report& r) {
  const ChartFrame f(r);
  std::ostringstream o;
  SvgHeader(r, f, o);
  SvgAxes(f, o);
  if (f.ceiling_on_chart) {
    const double x = f.px(r.ceiling->throughput_rps);
    o << "<line x1=\"" << x << "\" y1=\"" << ChartFrame::kTop << "\" x2=\"" << x << "\" y2=\""
      << ChartFrame::kTop + ChartFrame::kPlotH << "\" stroke=\"#888\" stroke-width=\"1.5\" stroke-dasharray=\"6,4\"/>\n";
    o << "<text x=\"" << x - 4 << "\" y=\"" << ChartFrame::kTop + 14 << "\" text-anchor=\"end\" fill=\"#666\">tool ceiling ("
      << Xml(r.ceiling->model) << ")</text>\n";
  }
  SvgCurves(r, f, o);
  o << "</svg>\n";
  return o.str();
}

es::Status CheckWritable(const std::string& path) {
  const std::string tmp = path + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return es::Status::Internal(path + ": " + es::ErrnoText(errno));
  }
  std::remove(tmp.c_str());
  return es::Status::Ok();
}

es::Status WriteFile(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return es::Status::Internal(path + ": " + es::ErrnoText(errno));
    out << text;
    out.flush();
    if (!out) {
      std::remove(tmp.c_str());
      return es::Status::Internal(path + ": write failed");
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int saved = errno;
    std::remove(tmp.c_str());
    return es::Status::Internal(path + ": " + es::ErrnoText(saved));
  }
  return es::Status::Ok();
}

}  // namespace es::loadgen
