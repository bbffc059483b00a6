// Packed models: M members of one zoo architecture (model_zoo.h) in one
// TorchScript module that computes all of them in one forward, so serving M
// same-architecture ensemble members costs one call (one interpreter pass,
// one set of kernel launches) instead of M.
//
// What it computes, for input x FP32 [B, 1, 28, 28]:
//   logits(x)  -> [B, M, 10]   [:, k] is member k's logits(x)
//   forward(x) -> [B, M, 10]   softmax over the last dim: [:, k] is member k's forward(x)
// equal to the members' own answers up to float rounding (the packed
// kernels sum in another order: ~1e-6).
//
// How: the first convolution (over the 1-channel input every member shares)
// is one ordinary conv2d with M*C output channels; later convolutions are
// grouped (groups = M), their weights concatenated along dim 0; the flatten
// reshapes to [B, M, -1], keeping each member's own (channel, h, w) order;
// linear layers are batched matrix products (baddbmm) over x as [M, B, in],
// with weights stored pre-transposed as [M, in, out] and biases as [M, 1, out].
// Normalisation and dropout stand where the members have them. Every
// parameter keeps its member's name (conv1_w, fc1_w, ...) and is a copy:
// no storage is shared with the members, between members, or with a module
// UnpackMember returns.
//
// The packed module's type is "Packed<member type>" (e.g. "PackedConvNet");
// it records what it holds in the attributes `packed_members` (int, M) and
// `packed_architecture` (str, the members' type name, e.g. "ConvNet"), which
// survive save and load. It is built in eval mode, for serving; it has a
// `training` attribute as zoo modules do, and its parameters require grad,
// so it can also be trained (dropout then follows train() / eval()).
//
// Errors (the members are never modified):
//   PackMembers: InvalidArgument for fewer than 2 members; for members of
//     different types (naming both and the member's index); for a type the
//     packer does not know (it knows the zoo's, listed); for a member whose
//     parameters differ from the architecture's (naming the member's index,
//     the parameter and both shapes; or the missing / extra parameter; or the
//     dtype, which must be FP32). Internal when LibTorch fails to build it.
//   UnpackMember: InvalidArgument for a module that is not a packed one, or
//     for k outside [0, M); Internal when its parameters do not have the
//     shapes its architecture says.
//
// Thread safety: both functions only read their arguments and may run
// concurrently, as long as nothing changes those modules meanwhile. A packed
// module is an ordinary TorchScript module: concurrent forward() calls are
// fine; train() / eval() / setattr must not overlap them.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"

namespace torch::jit {
struct Module;
}

namespace es {

// Packs `members` (at least 2, of one zoo architecture) into one module.
StatusOr<torch::jit::Module> PackMembers(const std::vector<torch::jit::Module>& members);

// Member k of a packed module, as a plain zoo module of the members'
// architecture (its type name, its parameter layout, the same answers as the
// member that was packed), in eval mode.
StatusOr<torch::jit::Module> UnpackMember(const torch::jit::Module& packed, int64_t k);

}  // namespace es
