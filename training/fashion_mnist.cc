#include "training/fashion_mnist.h"

#include <ATen/ops/from_blob.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <new>
#include <string>

#include "common/errno_text.h"
#include "torch_utils/torch_convert.h"

namespace es {
namespace {

constexpr uint32_t kImagesMagic = 0x00000803;  // IDX: unsigned bytes, 3 dimensions
constexpr uint32_t kLabelsMagic = 0x00000801;  // IDX: unsigned bytes, 1 dimension
constexpr size_t kImagesHeaderBytes = 16;
constexpr size_t kLabelsHeaderBytes = 8;
constexpr uint64_t kPixelsPerImage = kImageSide * kImageSide;
// Fashion-MNIST inflates to 47 MB; anything past this is not Fashion-MNIST and
// must not be allowed to eat the machine's memory (a gzip bomb, a wrong path).
constexpr size_t kMaxInflatedBytes = size_t{1} << 30;

Status FileError(StatusCode code, const std::string& path, const std::string& what) {
  return Status(code, "fashion-mnist: " + path + ": " + what);
}

std::string Hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

std::string JoinPath(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  return dir.back() == '/' ? dir + name : dir + "/" + name;
}

StatusOr<std::string> ReadWholeFile(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    const int err = errno;
    const StatusCode code = (err == ENOENT || err == ENOTDIR) ? StatusCode::kNotFound
                            : (err == EACCES || err == EPERM) ? StatusCode::kPermissionDenied
                                                              : StatusCode::kUnavailable;
    return Status(code, "fashion-mnist: cannot open " + path + ": " + ErrnoText(err));
  }
  std::string bytes;
  char chunk[1 << 16];
  size_t n = 0;
  while ((n = std::fread(chunk, 1, sizeof chunk, f)) > 0) bytes.append(chunk, n);
  const int err = std::ferror(f) != 0 ? errno : 0;
  std::fclose(f);
  if (err != 0) return Status::Unavailable("fashion-mnist: cannot read " + path + ": " + ErrnoText(err));
  return bytes;
}

// Inflates a whole gzip file (several concatenated members allowed, as gzip
// itself allows) into one buffer.
StatusOr<std::string> Gunzip(const std::string& path, const std::string& gz) {
  if (gz.size() < 2 || static_cast<uint8_t>(gz[0]) != 0x1f || static_cast<uint8_t>(gz[1]) != 0x8b) {
    return FileError(StatusCode::kDataLoss, path, "not a gzip file (it does not start with the gzip magic 1f 8b)");
  }
  if (gz.size() > UINT_MAX) return FileError(StatusCode::kInvalidArgument, path, "larger than 4 GiB");
  z_stream zs{};
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) return Status::Internal("fashion-mnist: inflateInit2 failed");
  struct End {
    z_stream* zs;
    ~End() { inflateEnd(zs); }
  } end{&zs};
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(gz.data()));
  zs.avail_in = static_cast<uInt>(gz.size());
  std::string out(std::max<size_t>(gz.size() * 2, size_t{1} << 16), '\0');
  size_t produced = 0;
  for (;;) {
    if (produced == out.size()) {
      if (out.size() >= kMaxInflatedBytes) {
        return FileError(StatusCode::kDataLoss, path, "inflates to more than 1 GiB; not a Fashion-MNIST file");
      }
      out.resize(std::min(out.size() * 2, kMaxInflatedBytes));
    }
    const size_t room = std::min<size_t>(out.size() - produced, UINT_MAX);
    zs.next_out = reinterpret_cast<Bytef*>(out.data() + produced);
    zs.avail_out = static_cast<uInt>(room);
    const int rc = inflate(&zs, Z_NO_FLUSH);
    produced += room - zs.avail_out;
    if (rc == Z_STREAM_END) {
      if (zs.avail_in == 0) break;
      if (inflateReset(&zs) != Z_OK) return Status::Internal("fashion-mnist: inflateReset failed");
      continue;
    }
    if (rc == Z_OK) continue;
    if (rc == Z_BUF_ERROR && zs.avail_in == 0) {
      return FileError(StatusCode::kDataLoss, path, "truncated gzip data (the file ends inside the compressed stream)");
    }
    if (rc == Z_MEM_ERROR) return Status::ResourceExhausted("fashion-mnist: out of memory inflating " + path);
    return FileError(StatusCode::kDataLoss, path,
                     std::string("corrupt gzip data: ") + (zs.msg != nullptr ? zs.msg : "inflate error"));
  }
  out.resize(produced);
  return out;
}

uint32_t BigEndian32(const std::string& bytes, size_t offset) {
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data()) + offset;
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

// Checks an inflated IDX file: magic, header, and that the body is exactly
// `count * item_bytes` long. Returns the count.
StatusOr<int64_t> CheckIdx(const std::string& path, const std::string& idx, uint32_t magic, size_t header_bytes,
                           const char* items, uint64_t item_bytes) {
  if (idx.size() < header_bytes) {
    return FileError(StatusCode::kDataLoss, path,
                     "truncated: " + std::to_string(idx.size()) + " bytes, shorter than the " +
                         std::to_string(header_bytes) + "-byte IDX header");
  }
  const uint32_t found = BigEndian32(idx, 0);
  if (found != magic) {
    return FileError(StatusCode::kDataLoss, path, "bad magic " + Hex32(found) + ", expected " + Hex32(magic));
  }
  const uint64_t count = BigEndian32(idx, 4);
  const uint64_t body = idx.size() - header_bytes;
  if (body < count * item_bytes) {
    return FileError(StatusCode::kDataLoss, path,
                     "truncated: header says " + std::to_string(count) + " " + items + ", file has " +
                         std::to_string(body / item_bytes));
  }
  if (body > count * item_bytes) {
    return FileError(StatusCode::kDataLoss, path,
                     "header says " + std::to_string(count) + " " + items + ", but " +
                         std::to_string(body - count * item_bytes) + " bytes follow them");
  }
  return static_cast<int64_t>(count);
}

StatusOr<std::string> ReadIdxGz(const std::string& path) {
  // Not ES_ASSIGN_OR_RETURN: GCC 12 then warns (wrongly) that the moved
  // buffer may be uninitialized where Gunzip reads its first bytes.
  const StatusOr<std::string> gz = ReadWholeFile(path);
  return gz.ok() ? Gunzip(path, *gz) : gz.status();
}

StatusOr<at::Tensor> LoadImages(const std::string& path) {
  ES_ASSIGN_OR_RETURN(std::string idx, ReadIdxGz(path));
  if (idx.size() >= kImagesHeaderBytes && BigEndian32(idx, 0) == kImagesMagic) {
    const uint32_t rows = BigEndian32(idx, 8);
    const uint32_t cols = BigEndian32(idx, 12);
    if (rows != kImageSide || cols != kImageSide) {
      return FileError(StatusCode::kInvalidArgument, path,
                       "images are " + std::to_string(rows) + "x" + std::to_string(cols) + ", expected 28x28");
    }
  }
  ES_ASSIGN_OR_RETURN(const int64_t count,
                      CheckIdx(path, idx, kImagesMagic, kImagesHeaderBytes, "images", kPixelsPerImage));
  // from_blob only views the buffer; to() makes the owned float copy before the buffer goes.
  void* pixels = idx.data() + kImagesHeaderBytes;
  return at::from_blob(pixels, {count, 1, kImageSide, kImageSide}, at::kByte).to(at::kFloat).div_(255.0);
}

StatusOr<at::Tensor> LoadLabels(const std::string& path) {
  ES_ASSIGN_OR_RETURN(std::string idx, ReadIdxGz(path));
  ES_ASSIGN_OR_RETURN(const int64_t count, CheckIdx(path, idx, kLabelsMagic, kLabelsHeaderBytes, "labels", 1));
  const auto* first = reinterpret_cast<const uint8_t*>(idx.data()) + kLabelsHeaderBytes;
  const auto* last = first + count;
  const auto* bad = std::find_if(first, last, [](uint8_t label) { return label >= kNumClasses; });
  if (bad != last) {
    return FileError(
        StatusCode::kDataLoss, path,
        "label " + std::to_string(*bad) + " at index " + std::to_string(bad - first) + " is out of range [0, 10)");
  }
  void* labels = idx.data() + kLabelsHeaderBytes;
  return at::from_blob(labels, {count}, at::kByte).to(at::kLong);
}

StatusOr<Dataset> Load(const std::string& dir, DataSplit split) {
  const std::string images_path = JoinPath(dir, FashionMnistImagesFile(split));
  const std::string labels_path = JoinPath(dir, FashionMnistLabelsFile(split));
  ES_ASSIGN_OR_RETURN(at::Tensor images, LoadImages(images_path));
  ES_ASSIGN_OR_RETURN(at::Tensor labels, LoadLabels(labels_path));
  if (images.size(0) != labels.size(0)) {
    return Status::InvalidArgument("fashion-mnist: " + images_path + " has " + std::to_string(images.size(0)) +
                                   " images but " + labels_path + " has " + std::to_string(labels.size(0)) +
                                   " labels");
  }
  return Dataset{std::move(images), std::move(labels)};
}

}  // namespace

std::string FashionMnistImagesFile(DataSplit split) {
  return split == DataSplit::kTrain ? "train-images-idx3-ubyte.gz" : "t10k-images-idx3-ubyte.gz";
}

std::string FashionMnistLabelsFile(DataSplit split) {
  return split == DataSplit::kTrain ? "train-labels-idx1-ubyte.gz" : "t10k-labels-idx1-ubyte.gz";
}

StatusOr<Dataset> LoadFashionMnist(const std::string& dir, DataSplit split) {
  // The edge of the component: allocation failures and LibTorch errors become a Status.
  try {
    return Load(dir, split);
  } catch (const std::bad_alloc&) {
    return Status::ResourceExhausted("fashion-mnist: out of memory loading " + dir);
  } catch (const std::exception& e) {
    return Status::Internal("fashion-mnist: loading " + dir + ": " + BriefTorchError(e.what()));
  }
}

}  // namespace es
