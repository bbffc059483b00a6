// CheckCanListen: whether the router could listen on ADDRESS:PORT now, so
// that a port already in use is reported in one clear line
// ("cannot listen for gRPC on 127.0.0.1:8001: address already in use")
// before any host is spawned, instead of after the hosts' start-up as a raw
// gRPC or civetweb log line. Port 0 (a free port) always can.
//
// A check, not a reservation: the socket is closed again, so a port taken
// in between still fails later (and that failure is reported the same way).
//
// Thread safety: a pure function.
#pragma once

#include <string>

#include "common/status.h"

namespace es {

// `what` names the listener in the message ("gRPC", "HTTP", "metrics").
Status CheckCanListen(const std::string& address, int port, const std::string& what);

}  // namespace es
