// LoadFashionMnist: reads the Fashion-MNIST IDX files that Debian's
// `dataset-fashion-mnist` package installs in /usr/share/datasets/fashion-mnist:
//
//   {train,t10k}-images-idx3-ubyte.gz   magic 0x00000803, N, 28, 28, then N*784 pixels
//   {train,t10k}-labels-idx1-ubyte.gz   magic 0x00000801, N, then N labels
//
// (gzip-compressed IDX, big-endian 32-bit header words.)
//
// Guarantees: the result satisfies Dataset's invariants (pixels / 255 as
// float32, labels int64 in [0, 10)). Nothing partial is ever returned: any
// defect is an error whose message starts with "fashion-mnist: " and names the
// file and what is wrong with it:
//   NOT_FOUND          the file does not exist ("cannot open PATH: No such file or directory")
//   PERMISSION_DENIED  the file cannot be read for lack of permission
//   DATA_LOSS          not gzip, corrupt or truncated gzip stream, bad magic,
//                      fewer/more bytes than the header says, a label >= 10
//   INVALID_ARGUMENT   well-formed IDX but not Fashion-MNIST shaped: images
//                      that are not 28x28, image count != label count
// Each file is inflated into one buffer and converted with one tensor op, so
// the 60,000-image training split loads in a fraction of a second.
//
// Thread safety: a pure function of the files; safe to call concurrently.
#pragma once

#include <string>

#include "common/status.h"
#include "training/dataset.h"

namespace es {

enum class DataSplit { kTrain, kTest };

// Where Debian's dataset-fashion-mnist package puts the files.
inline constexpr const char* kDebianFashionMnistDir = "/usr/share/datasets/fashion-mnist";

// The file names of `split`: {train,t10k}-{images-idx3,labels-idx1}-ubyte.gz.
std::string FashionMnistImagesFile(DataSplit split);
std::string FashionMnistLabelsFile(DataSplit split);

StatusOr<Dataset> LoadFashionMnist(const std::string& dir, DataSplit split);

}  // namespace es
