// Training-time augmentation of image rows: a random shift (a crop of the
// image padded with zeros by `shift` pixels on each side, as the usual
// "pad and random crop") and a random horizontal flip.
//
// What each row gets is a pure function of (seed, epoch, the row's position
// in the epoch's global order), never of the rank or thread that gathers
// it: one rank and W ranks train on the same augmented batches, so the
// distributed run still equals the single-process one (batch_loader.h's
// order contract). A disabled Augmentation leaves the rows untouched.
//
// Thread safety: pure functions over the tensor they are given.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace es {

struct Augmentation {
  int shift = 0;      // pixels, 0 = none; each row moves by dx, dy in [-shift, shift]
  bool flip = false;  // mirror left-right with probability 1/2
  bool enabled() const { return shift > 0 || flip; }
};

// What row `position` of epoch `epoch` gets.
struct RowTransform {
  int dx = 0, dy = 0;
  bool flip = false;
};
RowTransform DrawTransform(const Augmentation& a, uint64_t seed, int64_t epoch, int64_t position);

// Applies to `images` ([rows, channels, height, width], contiguous FP32,
// changed in place) the transforms of positions first_position,
// first_position + 1, ... Throws c10::Error on another layout.
void AugmentRows(at::Tensor& images, const Augmentation& a, uint64_t seed, int64_t epoch, int64_t first_position);

}  // namespace es
