// CollectiveGroup: the c10d object the trainer's collectives go through, the
// one type that differs between the LibTorch versions the project builds
// against. In 1.13 ProcessGroupGloo and ProcessGroupNCCL are ProcessGroups;
// from 2.0 they are Backends (a ProcessGroup became a facade that dispatches
// to them by device). Both have the calls the trainer makes (allreduce,
// broadcast, getRank, getSize, Work::wait with a timeout), so the trainer
// holds the Gloo or NCCL object itself, under this name.
#pragma once

#include <torch/version.h>

namespace c10d {
class Backend;
class ProcessGroup;
}  // namespace c10d

namespace es {

#if TORCH_VERSION_MAJOR >= 2
using CollectiveGroup = c10d::Backend;
#else
using CollectiveGroup = c10d::ProcessGroup;
#endif

}  // namespace es
