// Process-wide set-up of a program that serves or sends many gRPC calls.
//
// TuneGrpcProcess() is called once at the start of main() of the throughput
// programs (ensemble-server, ensemble-loadgen, the gRPC benchmarks), before
// gRPC starts. It does two things:
//  - It turns off Abseil's mutex deadlock detection: Debian 12 builds Abseil
//    without NDEBUG, so every absl::Mutex that gRPC locks also updates a
//    global lock graph (GraphCycles::GetId and friends showed up as about 3%
//    of the router's profile at 10,000 requests/s). The check only reports
//    lock-order bugs inside gRPC; it does not make any lock safer.
//  - It routes gRPC core's and protobuf's own log lines through spdlog's
//    default logger, so they carry the program's format and level instead
//    of appearing as raw lines on stderr. Call it after the default logger
//    is set up if the program installs its own; lines are forwarded to
//    whatever logger is the default when they are written.
#pragma once

namespace es {

void TuneGrpcProcess();

}  // namespace es
