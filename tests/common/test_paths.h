// Paths the tests need from this build and source tree: the binaries they
// run and the files they read. Each test target defines the ones it uses
// with es_test_paths (tests/CMakeLists.txt), in a small source generated in
// its build folder; using one the target did not define fails to link,
// naming it.
//
// Why not -D definitions: an absolute path on the compile line of every
// source of a target made each fresh clone (another folder) miss ccache for
// all of them, some two dozen LibTorch-heavy test sources, over a minute and
// a half of a warm build. Now only the generated source, a few lines long,
// is compiled again.
#pragma once

namespace es::test_paths {

// Binaries of this build.
extern const char kServerBin[];     // ensemble-server
extern const char kMakeDemoBin[];   // ensemble-make-demo (a path that does not exist in torch-free builds)
extern const char kTrainBin[];      // ensemble-train
extern const char kCliBin[];        // ensemble-cli
extern const char kLoadgenBin[];    // ensemble-loadgen
extern const char kLyingHostBin[];  // ensemble-lying-host (tests/fault)
extern const char kBlasProbeBin[];  // blas_probe (tests/torch_utils/integration)
extern const char kBinDir[];        // the folder of ensemble-server and the other tools

// The source tree.
extern const char kSourceDir[];             // its root
extern const char kIntegrationSourceDir[];  // tests/integration (its model-making scripts)
extern const char kMakeTestCertsSh[];       // tests/integration/make_test_certs.sh
extern const char kMakeEchoPy[];            // clients/make_echo_model.py
extern const char kDashboardJson[];         // docker/monitoring/grafana-dashboard.json

// Programs of the machine.
extern const char kNodeBin[];  // node, for the deployment files' validator

}  // namespace es::test_paths
