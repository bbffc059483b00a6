// test_deploy: the deployment files (docker/Dockerfile, docker/compose.yaml,
// docker/kubernetes/, docker/kserve/) checked offline, as far as a machine
// without a Docker engine or a cluster can: tests/deploy/validate.js (node,
// the npm packages pinned in tests/deploy/package-lock.json) parses them,
// validates them against the published schemas and checks every flag and
// port against the --help of the binaries built here; this test runs it on
// the repository and on deliberately broken copies (each must be rejected
// with the right message), and loads every server config the containers use
// with the real config parser.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "config/server_config.h"
#include "tests/common/test_paths.h"

namespace {

namespace fs = std::filesystem;

struct CommandResult {
  int exit_code = -1;
  std::string output;
};

// Runs a shell command line, returning its exit code and stdout+stderr.
CommandResult Shell(const std::string& command) {
  CommandResult run;
  std::string line = command;
  line.append(" 2>&1");
  FILE* pipe = popen(line.c_str(), "r");
  if (pipe == nullptr) return run;
  std::array<char, 4096> buffer{};
  size_t n = 0;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) run.output.append(buffer.data(), n);
  const int status = pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

std::string Quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'')
      out.append("'\\''");
    else
      out.push_back(c);
  }
  out.push_back('\'');
  return out;
}

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteFile(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
}

const fs::path kSource = es::test_paths::kSourceDir;

// Runs validate.js on `root` ("": the roots are in `extra`).
CommandResult Validate(const fs::path& root, const std::string& extra = "") {
  std::string cmd = Quote(es::test_paths::kNodeBin);
  cmd.append(" ").append(Quote((kSource / "tests/deploy/validate.js").string()));
  if (!root.empty()) cmd.append(" --root ").append(Quote(root.string()));
  cmd.append(" --bin-dir ").append(Quote(es::test_paths::kBinDir));
  if (!extra.empty()) cmd.append(" ").append(extra);
  return Shell(cmd);
}

// A scratch folder removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    std::string templ = (fs::temp_directory_path() / "es-deploy-XXXXXX").string();
    if (mkdtemp(templ.data()) != nullptr) path_ = templ;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// Copies what validate.js reads (docker/, the install scripts, the server's
// health service source) into `root`.
void CopyDeployTree(const fs::path& root) {
  fs::copy(kSource / "docker", root / "docker", fs::copy_options::recursive);
  for (const char* f : {"scripts/install-deb.sh", "scripts/package-test.sh", "scripts/install-deps.sh",
                        "scripts/package.sh", "server/grpc/grpc_service.cc"}) {
    if (!fs::exists(kSource / f)) continue;
    fs::create_directories((root / f).parent_path());
    fs::copy_file(kSource / f, root / f);
  }
}

TEST(DeployFiles, TheRepositoryPasses) {
  const CommandResult run = Validate(kSource);
  EXPECT_EQ(run.exit_code, 0) << run.output;
  for (const char* section :
       {"ok: docker/Dockerfile", "ok: docker/compose.yaml", "ok: docker/kubernetes", "ok: docker/kserve"}) {
    EXPECT_NE(run.output.find(section), std::string::npos) << section << "\n" << run.output;
  }
}

// Every server config a container starts with (the image's, the CPU and
// GPU ConfigMaps, KServe's) loads with the real parser. Only `repository:`
// is pointed at an existing folder here (the containers' /models and
// /mnt/models are mounts).
TEST(DeployFiles, ServerConfigsLoadWithTheRealParser) {
  TempDir out;
  ASSERT_FALSE(out.path().empty());
  const CommandResult run = Validate(kSource, "--write-configs " + Quote(out.path().string()));
  ASSERT_TRUE(fs::exists(out.path() / "index.txt")) << run.output;
  fs::create_directories(out.path() / "repo");
  std::istringstream index(ReadFile(out.path() / "index.txt"));
  std::string line;
  int loaded = 0;
  while (std::getline(index, line)) {
    if (line.empty()) continue;
    const std::string name = line.substr(0, line.find('\t'));
    std::string text = ReadFile(out.path() / name);
    const size_t at = text.find("repository: /");
    ASSERT_NE(at, std::string::npos) << name << " has no absolute repository";
    text.replace(at, text.find('\n', at) - at, "repository: " + (out.path() / "repo").string());
    WriteFile(out.path() / name, text);
    auto config = es::LoadServerConfig((out.path() / name).string(), /*with_repository=*/false);
    EXPECT_TRUE(config.ok()) << line << ": " << config.status().ToString();
    if (config.ok()) {
      EXPECT_EQ(config->listen_address, "0.0.0.0") << line;
      EXPECT_FALSE(config->hosts.empty()) << line;
    }
    ++loaded;
  }
  EXPECT_GE(loaded, 4) << "expected the image's, the two ConfigMaps' and KServe's config:\n" << run.output;
}

// The parser check above must be able to fail: a ConfigMap with a misspelt
// key is refused by the same loader.
TEST(DeployFiles, AMisspeltConfigMapKeyIsRefusedByTheParser) {
  TempDir root;
  CopyDeployTree(root.path());
  const fs::path cm = root.path() / "docker/kubernetes/20-configmap-cpu.yaml";
  std::string text = ReadFile(cm);
  const size_t at = text.find("executors: 1");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, 9, "executor:");
  WriteFile(cm, text);
  TempDir out;
  Validate(root.path(), "--write-configs " + Quote(out.path().string()));
  const fs::path file = out.path() / "ensemble-serve-cpu_server.yaml";
  ASSERT_TRUE(fs::exists(file));
  std::string config = ReadFile(file);
  config.replace(config.find("repository: /models"), 19, "repository: " + out.path().string());
  WriteFile(file, config);
  auto loaded = es::LoadServerConfig(file.string(), false);
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().ToString().find("executor"), std::string::npos) << loaded.status().ToString();
}

struct Breakage {
  const char* name;
  const char* file;      // relative to the repository root
  const char* from;      // first occurrence replaced ...
  const char* to;        // ... by this
  const char* expected;  // in validate.js's output
};

// ctest lists a case by its name, not its bytes.
void PrintTo(const Breakage& b, std::ostream* os) { *os << b.name; }

const Breakage kBreakages[] = {
    // Kubernetes schemas (kubernetes-models) and Prometheus Operator's.
    {"PortAsString", "docker/kubernetes/40-deployment-cpu.yaml", "containerPort: 8001", "containerPort: \"8001\"",
     "containerPort must be integer"},
    {"ProbePeriodNotInteger", "docker/kubernetes/40-deployment-cpu.yaml", "periodSeconds: 5", "periodSeconds: five",
     "periodSeconds must be integer"},
    // Unknown fields, as kubectl's default --validate=strict rejects them.
    {"MisspeltProbe", "docker/kubernetes/40-deployment-cpu.yaml",
     "readinessProbe:", "readinesProbe:", "unknown field 'readinesProbe'"},
    {"MisspeltPodMonitorField", "docker/kubernetes/70-podmonitor.yaml", "path: /metrics", "pth: /metrics",
     "unknown field 'pth'"},
    {"PodMonitorInterval", "docker/kubernetes/70-podmonitor.yaml", "interval: 15s", "interval: [15s]",
     "PodMonitor/ensemble-serve: Kubernetes schema"},
    {"PdbBothBudgets", "docker/kubernetes/60-pdb.yaml", "maxUnavailable: 1", "maxUnavailable: {n: 1}",
     "PodDisruptionBudget/ensemble-serve: Kubernetes schema"},
    // Flags and values against --help.
    {"UnknownServerFlag", "docker/kubernetes/40-deployment-cpu.yaml", "- --repository-poll-secs",
     "- --repository-poll-seconds", "has no option --repository-poll-seconds"},
    {"FlagValueOutOfRange", "docker/kubernetes/40-deployment-gpu.yaml", "- \"15\"", "- \"0\"",
     "--repository-poll-secs 0 is outside [1 - 86400]"},
    {"UnknownDemoFlag", "docker/kubernetes/30-demo-repository-job.yaml", "\"--train-steps\"", "\"--train-step\"",
     "has no option --train-step"},
    // Probes and ports against the server's flags and config.
    {"ProbeOnWrongPort", "docker/kubernetes/40-deployment-cpu.yaml", "grpc: {port: 8001", "grpc: {port: 8011",
     "asks gRPC port 8011, the server's is 8001"},
    {"ProbeUnknownHealthService", "docker/kubernetes/40-deployment-cpu.yaml", "service: inference.GRPCInferenceService",
     "service: inference.Bogus", "which the server answers NOT_FOUND"},
    {"ConfigPortMismatch", "docker/kubernetes/20-configmap-cpu.yaml", "http_port: 8000", "http_port: 8080",
     "container port 'http' is 8000, the server listens on 8080"},
    {"ConfigOnLoopback", "docker/kubernetes/20-configmap-cpu.yaml", "listen_address: 0.0.0.0",
     "listen_address: 127.0.0.1", "a container must listen on 0.0.0.0"},
    {"GpuHostsNotOnePerGpu", "docker/kubernetes/20-configmap-gpu.yaml",
     "      - {name: gpu7, device: \"cuda:7\", threads: 2, executors: 4}\n", "", "nvidia.com/gpu is 8 but"},
    {"ServiceTargetsUnknownPort", "docker/kubernetes/50-service.yaml", "targetPort: metrics", "targetPort: metric",
     "which the pods do not declare"},
    {"PodMonitorUnknownPort", "docker/kubernetes/70-podmonitor.yaml", "- port: metrics", "- port: metric",
     "is not a container port of the pods"},
    {"PdbSelectsNothing", "docker/kubernetes/60-pdb.yaml", "component: server", "component: servr",
     "selects no Deployment's pods"},
    {"MissingConfigMap", "docker/kubernetes/40-deployment-cpu.yaml", "configMap: {name: ensemble-serve-cpu}",
     "configMap: {name: ensemble-serve}", "no ConfigMap ensemble-serve"},
    {"GraceShorterThanDrain", "docker/kubernetes/40-deployment-cpu.yaml", "terminationGracePeriodSeconds: 40",
     "terminationGracePeriodSeconds: 15", "does not cover drain_timeout_ms"},
    // KServe: the vendored CRD schemas and the runtime/service contract.
    {"KServeUnknownProtocol", "docker/kserve/20-servingruntime.yaml", "protocolVersions: [v2, grpc-v2]",
     "protocolVersions: [v3, grpc-v2]", "not one of KServe's"},
    {"KServeUnknownField", "docker/kserve/30-inferenceservice.yaml",
     "storageUri:", "storageUrl:", "must NOT have additional properties 'storageUrl'"},
    {"KServeWrongType", "docker/kserve/20-servingruntime.yaml", "multiModel: false", "multiModel: \"no\"",
     "/spec/multiModel must be boolean"},
    {"KServeUnknownRuntime", "docker/kserve/30-inferenceservice.yaml", "runtime: ensemble-serve", "runtime: triton",
     "runtime 'triton' is no ServingRuntime"},
    {"KServeFormatUnsupported", "docker/kserve/30-inferenceservice.yaml", "modelFormat: {name: ensemble-serve",
     "modelFormat: {name: onnx", "is not supported by runtime"},
    {"KServeHttpPort", "docker/kserve/20-servingruntime.yaml", "--http-port=8080", "--http-port=8081",
     "KServe sends HTTP to 8080, the server listens on 8081"},
    {"KServeBadFlagValue", "docker/kserve/20-servingruntime.yaml", "--grpc-port=9000", "--grpc-port=ninety",
     "--grpc-port takes an integer"},
    // Dockerfile: stages, install script, flags, ports, user.
    {"CopyFromUnknownStage", "docker/Dockerfile", "COPY --from=build", "COPY --from=builder", "names no earlier stage"},
    {"InstallScriptNotRun", "docker/Dockerfile", "RUN /usr/local/lib/ensemble-serve/install-deb.sh",
     "RUN apt-get install -y", "never RUNs /usr/local/lib/ensemble-serve/install-deb.sh"},
    {"InstallScriptNotCopied", "docker/Dockerfile", "COPY scripts/install-deb.sh", "COPY scripts/install-deps.sh",
     "does not COPY scripts/install-deb.sh"},
    {"RunOfMissingScript", "docker/Dockerfile", "RUN scripts/package.sh", "RUN scripts/packages.sh",
     "RUN names scripts/packages.sh, which does not exist"},
    {"CopyOfMissingFile", "docker/Dockerfile", "COPY docker/server.yaml", "COPY docker/servr.yaml",
     "COPY source docker/servr.yaml does not exist"},
    {"UnknownCmdFlag", "docker/Dockerfile", "CMD [\"--config\"", "CMD [\"--configfile\"", "has no option --configfile"},
    {"PortNotExposed", "docker/Dockerfile", "EXPOSE 8000 8001 8002", "EXPOSE 8000 8001", "EXPOSE lacks 8002"},
    {"NamedUser", "docker/Dockerfile", "USER 10001:10001", "USER ensemble-serve", "numeric non-root UID"},
    {"HealthcheckWrongPort", "docker/Dockerfile", "\"127.0.0.1:8000\"", "\"127.0.0.1:8001\"",
     "the health check asks port 8001, the server listens on 8000"},
    {"NotDebian", "docker/Dockerfile", "FROM debian:12-slim AS runtime", "FROM ubuntu:24.04 AS runtime",
     "is based on ubuntu:24.04, not Debian 12"},
    // compose.yaml: the compose-spec schema, flags, ports, mounts.
    {"ComposeSchema", "docker/compose.yaml", "restart: unless-stopped", "restart: [unless-stopped]",
     "compose-spec: /services/server/restart must be string"},
    {"ComposeDuration", "docker/compose.yaml", "stop_grace_period: 30s", "stop_grace_period: thirty",
     "services.server.stop_grace_period: 'thirty' is not a duration"},
    {"ComposeUnknownFlag", "docker/compose.yaml", "- --model-control-mode", "- --model-control",
     "has no option --model-control"},
    {"ComposePortNotPublished", "docker/compose.yaml", "\"127.0.0.1:8001:8001\"", "\"127.0.0.1:8001:8011\"",
     "the server's grpc port 8001 is not published"},
    {"ComposeDemoFlag", "docker/compose.yaml", "--train-steps 0;", "--train-step 0;", "has no option --train-step"},
    {"ComposeMissingBindSource", "docker/compose.yaml", "./monitoring/prometheus-compose.yml:", "./monitoring/prom.yml:",
     "bind mount source ./monitoring/prom.yml does not exist"},
    {"GrafanaDataSourceElsewhere", "docker/monitoring/grafana/provisioning/datasources/prometheus.yaml",
     "url: http://prometheus:9090", "url: http://server:9090",
     "no Grafana prometheus data source at http://prometheus:9090"},
    {"ComposeScrapesElsewhere", "docker/monitoring/prometheus-compose.yml", "'server:8002'", "'127.0.0.1:8002'",
     "prometheus-compose.yml scrapes 127.0.0.1:8002, not the server's server:8002"},
    {"GrafanaProviderWrongFolder", "docker/monitoring/grafana/provisioning/dashboards/ensemble-serve.yaml",
     "path: /var/lib/grafana/dashboards", "path: /var/lib/grafana/dashboard", "where compose mounts no dashboard"},
    {"ComposeYamlSyntax", "docker/compose.yaml", "services:\n", "services:\n  - [\n", "YAML:"},
};

// Every case's broken copy is validated in one node run (node's start, its
// schemas and the binaries' --help once, not once per case: 46 runs took
// about 300 s of CPU in CI): ctest runs the suite as one test.
class BrokenCopy : public ::testing::TestWithParam<Breakage> {
 protected:
  static void SetUpTestSuite() {
    scratch_ = std::make_unique<TempDir>();
    std::vector<std::string> roots;
    for (const Breakage& b : kBreakages) {
      const fs::path root = scratch_->path() / b.name;
      fs::create_directories(root);
      CopyDeployTree(root);
      const fs::path file = root / b.file;
      std::string text = ReadFile(file);
      const size_t at = text.find(b.from);
      if (at == std::string::npos) {
        results_[b.name] = {-2, std::string(b.file) + " no longer contains '" + b.from + "': update this case"};
        continue;
      }
      text.replace(at, std::string(b.from).size(), b.to);
      WriteFile(file, text);
      roots.push_back("--root " + Quote(root.string()));
    }
    const fs::path results = scratch_->path() / "results.json";
    std::string extra = "--results " + Quote(results.string());
    for (const std::string& root : roots) extra.append(" ").append(root);
    const CommandResult run = Validate("", extra);
    const nlohmann::json parsed = nlohmann::json::parse(ReadFile(results), nullptr, /*allow_exceptions=*/false);
    for (const Breakage& b : kBreakages) {
      const std::string root = (scratch_->path() / b.name).string();
      if (results_.count(b.name) != 0) continue;
      if (parsed.is_discarded() || !parsed.contains(root)) {
        results_[b.name] = {-1, "validate.js gave no result for this copy:\n" + run.output};
        continue;
      }
      results_[b.name] = {parsed[root]["exit"].get<int>(), parsed[root]["output"].get<std::string>()};
    }
  }
  static void TearDownTestSuite() { scratch_.reset(); }

  static inline std::unique_ptr<TempDir> scratch_;
  static inline std::map<std::string, CommandResult> results_;
};

TEST_P(BrokenCopy, IsRejected) {
  const Breakage& b = GetParam();
  const CommandResult& run = results_[b.name];
  ASSERT_NE(run.exit_code, -2) << run.output;
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_NE(run.output.find(b.expected), std::string::npos) << "expected '" << b.expected << "' in:\n" << run.output;
}

INSTANTIATE_TEST_SUITE_P(DeployFiles, BrokenCopy, ::testing::ValuesIn(kBreakages),
                         [](const ::testing::TestParamInfo<Breakage>& param) { return param.param.name; });

}  // namespace
