// The spec of one model version as the router hands it to a model host in a
// load request (ipc::RequestKind::kLoad): the fields a host needs to load
// and run it (name, platform, folder, batching, tensors), as a small JSON
// text in the request's input 0.
//
// Why a spec and not a path to config.yaml: the router is the one source of
// truth about what is served. A host told "load m version 2" computes
// exactly the config the router validated and routes by, even when the
// file on disk has changed since (a poll not yet applied, an edit half
// made); it reads model.pt and nothing else of the repository.
//
// Thread safety: pure functions.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"
#include "config/model_config.h"

namespace es {

// The spec of a torchscript model (its version travels beside it); its
// name is the model's HostKey(), what requests for it name on the channel.
std::string EncodeHostModelSpec(const ModelConfig& model);

// What a model's serving depends on besides its versions: its spec (host
// key included), hosts, instances, execution limit and batching. Two
// configs with one signature are served alike: they share a dispatcher, and
// a reload that changes only the version folders keeps the host key.
std::string ServingSignature(const ModelConfig& model);

// The inverse; an error names the field that is missing or wrong. Every
// field is checked as config.yaml's would be (the text crossed a process
// boundary). Fields a host does not use (hosts, batching, ensemble) are
// left at their defaults.
StatusOr<ModelConfig> DecodeHostModelSpec(std::string_view text);

}  // namespace es
