#include "torch_utils/packed_model.h"

#include <torch/script.h>

#include <algorithm>
#include <map>
#include <sstream>
#include <string>
#include <utility>

#include "torch_utils/model_zoo.h"

namespace es {
namespace {

constexpr const char* kMembersAttribute = "packed_members";
constexpr const char* kArchitectureAttribute = "packed_architecture";

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

// The last atom of the type's name: what a module built here calls "ConvNet"
// may come back from torch::jit::load qualified (e.g. "__torch__.ConvNet").
std::string TypeName(const torch::jit::Module& m) { return m.type()->name()->name(); }

const ZooDescription* FindType(const std::string& type_name) {
  for (const ZooDescription& description : ZooDescriptions()) {
    if (description.type_name == type_name) return &description;
  }
  return nullptr;
}

std::string ShapeString(at::IntArrayRef shape) {
  std::ostringstream out;
  out << shape;  // "[16, 1, 3, 3]"
  return out.str();
}

// Member k must hold exactly the FP32 parameters `description` says, with
// its shapes: the packed source indexes and reshapes by those shapes, and a
// mismatch would otherwise surface as a shape error deep in a forward (or,
// worse, as a silently wrong split between members).
Status CheckParameters(const torch::jit::Module& member, size_t k, const ZooDescription& description) {
  std::map<std::string, torch::Tensor> left;
  for (const auto& p : member.named_parameters()) left.emplace(p.name, p.value);
  const std::string who = "member " + std::to_string(k);
  const std::string a_type = "a " + description.type_name;
  for (const ZooLayer& layer : description.layers) {
    if (!layer.HasParameters()) continue;
    for (const auto& [name, shape] : {std::pair{layer.name + "_w", layer.WeightShape()},
                                      std::pair{layer.name + "_b", std::vector<int64_t>{layer.out}}}) {
      const auto it = left.find(name);
      if (it == left.end()) {
        return Status::InvalidArgument(who + " has no parameter '" + name + "' (" + a_type + " has one)");
      }
      if (it->second.sizes() != at::IntArrayRef(shape)) {
        return Status::InvalidArgument(who + "'s parameter '" + name + "' has shape " +
                                       ShapeString(it->second.sizes()) + " where " + a_type + " has " +
                                       ShapeString(shape));
      }
      if (it->second.scalar_type() != torch::kFloat32) {
        return Status::InvalidArgument(who + "'s parameter '" + name + "' is " +
                                       std::string(c10::toString(it->second.scalar_type())) + ", not Float");
      }
      left.erase(it);
    }
  }
  if (!left.empty()) {
    return Status::InvalidArgument(who + " has a parameter '" + left.begin()->first + "' that " + a_type +
                                   " does not have");
  }
  return Status::Ok();
}

// Rows computed at once: the largest activation of a chunk stays under
// this, well below the 32 MiB malloc keeps for reuse (tensor_memory.h).
// Twelve convnets' first activation is 602 KB a row: unchunked, a batch of
// 64 (38.5 MB) was mapped afresh on every forward, 2.5x slower. Not
// larger either: with 24 MiB (six convnets' batch of 64 whole, 19 MB) a
// model host's batch-64 call took 3.8x the CPU, although one thread of a
// plain process computed it 13% faster than in 8 MiB chunks: a model host
// computes on executor threads, whose malloc arenas are heaps of at most
// 64 MiB that give such blocks back as they shrink.
constexpr int64_t kChunkBytes = int64_t{8} << 20;

// The bytes of the largest activation one input row makes in the packed module.
int64_t ActivationBytesPerRow(const ZooDescription& description, int64_t members) {
  int64_t side = 28, largest = side * side;
  for (const ZooLayer& layer : description.layers) {
    if (layer.kind == ZooLayer::Kind::kConv) {
      largest = std::max(largest, layer.out * side * side);  // before its pool
      side /= 2;
    } else if (layer.kind == ZooLayer::Kind::kLinear) {
      largest = std::max(largest, layer.out);
    }
  }
  return members * largest * static_cast<int64_t>(sizeof(float));
}

// The packed logits(). It relies on the zoo's layer order, [normalise]
// conv* flatten (linear | dropout)*, and keeps x as [B, M*C, H, W] through
// the convolutions and as [M, B, features] from the flatten on.
std::string PackedLogitsSource(const ZooDescription& description, int64_t members) {
  const std::string m = std::to_string(members);
  const int64_t rows = std::max<int64_t>(1, kChunkBytes / ActivationBytesPerRow(description, members));
  // logits() takes the batch a chunk of rows at a time (each row's answer
  // is its own, so the result is the same); logits_rows() computes one.
  std::string chunked =
      "\ndef logits(self, x):\n"
      "    if x.size(0) <= " + std::to_string(rows) + ":\n"
      "        return self.logits_rows(x)\n"
      "    parts = [self.logits_rows(chunk) for chunk in torch.split(x, " + std::to_string(rows) + ")]\n"
      "    return torch.cat(parts, 0)\n";
  std::string source = "\ndef logits_rows(self, x):\n";
  // Until the first layer with parameters, x is the same for every member.
  bool shared = true;
  for (const ZooLayer& layer : description.layers) {
    const std::string w = "self." + layer.name + "_w", b = "self." + layer.name + "_b";
    switch (layer.kind) {
      case ZooLayer::Kind::kConv:
        // Over the shared input, the member's own line computes all M at
        // once (the weight has M*C filters); afterwards group g of the
        // channels is member g's, so a grouped convolution keeps them apart.
        if (shared) {
          source += ZooLayerSource(layer);
        } else {
          std::string conv = "torch.conv2d(x, ";
          conv.append(w).append(", ").append(b).append(", [1, 1], [1, 1], [1, 1], ").append(m).append(")");
          source += ZooConvSource(conv);
        }
        break;
      case ZooLayer::Kind::kFlatten:
        // Either way x becomes [M, B, features], member k's features in the
        // order its own flatten gives them (channel, h, w).
        source += shared ? "    x = torch.flatten(x, 1).expand([" + m + ", -1, -1])\n"
                         : "    x = x.reshape([x.size(0), " + m + ", -1]).transpose(0, 1)\n";
        break;
      case ZooLayer::Kind::kLinear: {
        // One batched product for the M members: b[k] + x[k] @ w[k].
        const std::string linear = "torch.baddbmm(" + b + ", x, " + w + ")";
        source += "    x = " + (layer.relu ? "torch.relu(" + linear + ")" : linear) + "\n";
        break;
      }
      default:
        // Normalisation and dropout are elementwise: the member's line as it is.
        source += ZooLayerSource(layer);
    }
    if (layer.HasParameters()) shared = false;
  }
  // [M, B, 10] -> [B, M, 10]; contiguous, so that what serving reads as raw
  // bytes is in that order.
  return source + "    return x.transpose(0, 1).contiguous()\n" + chunked;
}

}  // namespace

StatusOr<torch::jit::Module> PackMembers(const std::vector<torch::jit::Module>& members) {
  if (members.size() < 2) {
    return Status::InvalidArgument("packing needs at least 2 members, got " + std::to_string(members.size()));
  }
  const std::string type = TypeName(members[0]);
  for (size_t k = 1; k < members.size(); ++k) {
    if (TypeName(members[k]) != type) {
      return Status::InvalidArgument("member " + std::to_string(k) + " is a " + TypeName(members[k]) + ", member 0 a " +
                                     type + ": packed members must share one architecture");
    }
  }
  const ZooDescription* description = FindType(type);
  if (description == nullptr) {
    std::string known;
    for (const ZooDescription& d : ZooDescriptions()) known += (known.empty() ? "" : ", ") + d.type_name;
    return Status::InvalidArgument("the members are of type '" + type +
                                   "', which the packer does not know (known: " + known + ")");
  }
  for (size_t k = 0; k < members.size(); ++k) ES_RETURN_IF_ERROR(CheckParameters(members[k], k, *description));

  const auto count = static_cast<int64_t>(members.size());
  try {
    // The packed parameters are new leaves, not results in any member's
    // autograd graph; cat and stack always copy, so nothing is shared.
    torch::NoGradGuard no_grad;
    NamedTensors parameters;
    for (const ZooLayer& layer : description->layers) {
      if (!layer.HasParameters()) continue;
      std::vector<torch::Tensor> weights, biases;
      for (const torch::jit::Module& member : members) {
        const torch::Tensor w = member.attr(layer.name + "_w").toTensor();
        // Linear weights pre-transposed to [in, out], as baddbmm takes them.
        weights.push_back(layer.kind == ZooLayer::Kind::kLinear ? w.t() : w);
        biases.push_back(member.attr(layer.name + "_b").toTensor());
      }
      if (layer.kind == ZooLayer::Kind::kConv) {
        parameters.emplace_back(layer.name + "_w", torch::cat(weights, 0));  // [M*out, in, 3, 3]
        parameters.emplace_back(layer.name + "_b", torch::cat(biases, 0));   // [M*out]
      } else {
        parameters.emplace_back(layer.name + "_w", torch::stack(weights, 0));              // [M, in, out]
        parameters.emplace_back(layer.name + "_b", torch::stack(biases, 0).unsqueeze(1));  // [M, 1, out]
      }
    }
    torch::jit::Module packed =
        AssembleZooModule("Packed" + type, parameters, PackedLogitsSource(*description, count), /*softmax_dim=*/2);
    packed.register_attribute(kMembersAttribute, c10::IntType::get(), count);
    packed.register_attribute(kArchitectureAttribute, c10::StringType::get(), type);
    return packed;
  } catch (const c10::Error& e) {
    return Status::Internal("packing " + std::to_string(count) + " " + type +
                            " members: " + e.what_without_backtrace());
  }
}

StatusOr<torch::jit::Module> UnpackMember(const torch::jit::Module& packed, int64_t k) {
  const std::string what = "a module of type '" + TypeName(packed) + "'";
  if (!packed.hasattr(kMembersAttribute) || !packed.hasattr(kArchitectureAttribute)) {
    return Status::InvalidArgument(what + " is not a packed module (it has no " + kMembersAttribute + " and " +
                                   kArchitectureAttribute + " attributes)");
  }
  try {
    const int64_t count = packed.attr(kMembersAttribute).toInt();
    const std::string type = packed.attr(kArchitectureAttribute).toStringRef();
    if (k < 0 || k >= count) {
      return Status::InvalidArgument("no member " + std::to_string(k) + " in " + what + ": it packs " +
                                     std::to_string(count) + " " + type + " members (0 to " +
                                     std::to_string(count - 1) + ")");
    }
    const ZooDescription* description = FindType(type);
    if (description == nullptr) {
      return Status::InvalidArgument(what + " packs members of type '" + type + "', which the packer does not know");
    }
    // Copies (clone): the member must not change when the packed module does.
    torch::NoGradGuard no_grad;
    NamedTensors parameters;
    for (const ZooLayer& layer : description->layers) {
      if (!layer.HasParameters()) continue;
      const torch::Tensor w = packed.attr(layer.name + "_w").toTensor();
      const torch::Tensor b = packed.attr(layer.name + "_b").toTensor();
      const bool conv = layer.kind == ZooLayer::Kind::kConv;
      torch::Tensor member_w =
          conv ? w.narrow(0, k * layer.out, layer.out).clone() : w[k].t().clone(at::MemoryFormat::Contiguous);
      torch::Tensor member_b = conv ? b.narrow(0, k * layer.out, layer.out).clone() : b[k][0].clone();
      if (member_w.sizes() != at::IntArrayRef(layer.WeightShape()) || member_b.sizes() != at::IntArrayRef{layer.out}) {
        return Status::Internal(what + "'s parameters '" + layer.name + "_w' and '" + layer.name +
                                "_b' do not have the shapes of " + std::to_string(count) + " packed " + type + "s");
      }
      parameters.emplace_back(layer.name + "_w", std::move(member_w));
      parameters.emplace_back(layer.name + "_b", std::move(member_b));
    }
    return AssembleZooModule(description->type_name, parameters, ZooLogitsSource(*description), /*softmax_dim=*/1);
  } catch (const c10::Error& e) {
    return Status::Internal("unpacking member " + std::to_string(k) + " of " + what + ": " +
                            e.what_without_backtrace());
  }
}

}  // namespace es
