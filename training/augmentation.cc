#include "training/augmentation.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <vector>

#include "training/seed_mix.h"

namespace es {

RowTransform DrawTransform(const Augmentation& a, uint64_t seed, int64_t epoch, int64_t position) {
  const uint64_t r = MixSeed(MixSeed(MixSeed(seed) ^ static_cast<uint64_t>(epoch)) ^ static_cast<uint64_t>(position));
  RowTransform t;
  if (a.shift > 0) {
    const uint64_t span = static_cast<uint64_t>(2 * a.shift + 1);
    t.dx = static_cast<int>(r % span) - a.shift;
    t.dy = static_cast<int>((r >> 16) % span) - a.shift;
  }
  t.flip = a.flip && ((r >> 40) & 1) != 0;
  return t;
}

void AugmentRows(at::Tensor& images, const Augmentation& a, uint64_t seed, int64_t epoch, int64_t first_position) {
  if (!a.enabled()) return;
  TORCH_CHECK(images.dim() == 4 && images.scalar_type() == at::kFloat && images.is_contiguous(),
              "AugmentRows needs contiguous FP32 [rows, channels, height, width], got ", images.sizes());
  const int64_t rows = images.size(0), channels = images.size(1), h = images.size(2), w = images.size(3);
  float* data = images.data_ptr<float>();
  std::vector<float> plane(static_cast<size_t>(h * w));
  for (int64_t r = 0; r < rows; ++r) {
    const RowTransform t = DrawTransform(a, seed, epoch, first_position + r);
    if (t.dx == 0 && t.dy == 0 && !t.flip) continue;
    for (int64_t c = 0; c < channels; ++c) {
      float* p = data + (r * channels + c) * h * w;
      std::copy(p, p + h * w, plane.begin());
      for (int64_t y = 0; y < h; ++y) {
        for (int64_t x = 0; x < w; ++x) {
          // Output (y, x) reads source (y - dy, x' - dx), x' the mirrored column when flipped.
          const int64_t sx = (t.flip ? w - 1 - x : x) - t.dx;
          const int64_t sy = y - t.dy;
          p[y * w + x] = sy >= 0 && sy < h && sx >= 0 && sx < w ? plane[static_cast<size_t>(sy * w + sx)] : 0.0f;
        }
      }
    }
  }
}

}  // namespace es
