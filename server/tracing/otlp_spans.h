// OTLP spans from finished request traces (server/core/request_trace.h):
// the message the OTLP/HTTP exporter posts (proto/otlp_trace.proto).
//
// One traced request becomes this tree (names as a trace viewer shows them):
//
//   infer <model>              SERVER  the call: received .. answer sent
//     decode                           the request read and checked
//     queue                            the model's queue (dynamic batcher)
//     submit                           inputs copied into the host's arena
//     host <host>              CLIENT  the router waiting on the host
//       host queue                     ... the request waiting in the ring   } the host's own times,
//       compute                        ... the model's forward               } under the host's resource
//     read outputs                     outputs copied out of the arena
//     member <member>                  an ensemble's member call: a trace of
//       queue, submit, host ...        its own, its span a child of the
//     combine                          ensemble's; the members' answers combined
//     encode                           the answer encoded
//     send                             handed to the transport
//
// Spans a trace has no timestamps for are left out (an ensemble has no
// queue of its own; a cached answer no host). Times become Unix-epoch
// nanoseconds with the steady-to-system clock offset of the moment Build
// runs.
//
// The host's times are the host's claims (ipc::CompletionDesc): used only
// when ordered (received <= compute start <= compute end) and no longer
// than the router's own window of the call (inputs submitted .. completion
// arrived). Hosts share the router's monotonic clock, so they normally lie
// inside that window; when they do not (a host on another clock), they are
// shifted to its middle, and the shift is an attribute of the host spans
// (es.clock_offset_ns). Times that cannot fit are left out, and the host
// span says so (es.host_times: "inconsistent").
//
// Resources: the router's spans under service.name "ensemble-server"; each
// host's under "ensemble-model-host" with its name (es.host) and device
// (es.device); both with host.name (the machine), the router's also with
// its process.pid.
//
// Thread safety: Build is const and may run on any thread.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "proto/otlp_trace.pb.h"
#include "server/core/request_trace.h"

namespace es {

struct SpanResources {
  std::string machine;                         // host.name
  int64_t router_pid = 0;                      // process.pid of the router
  std::map<std::string, std::string> devices;  // host name -> device ("cpu", "cuda:0")
};

class OtlpSpanBuilder {
 public:
  explicit OtlpSpanBuilder(SpanResources resources) : resources_(std::move(resources)) {}

  ensemble_serve::otlp::ExportTraceServiceRequest Build(const std::vector<std::shared_ptr<RequestTrace>>& traces) const;

 private:
  SpanResources resources_;
};

}  // namespace es
