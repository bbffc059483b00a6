#include "server/core/response_cache.h"

#include <openssl/evp.h>

#include <memory>

#include "common/status_macros.h"

namespace es {
namespace {

// Per entry beside its tensors' bytes: the key, names and list nodes.
constexpr uint64_t kEntryOverhead = 256;

uint64_t BytesOf(const std::string& model, const std::vector<InferOutput>& outputs) {
  uint64_t bytes = kEntryOverhead + model.size();
  for (const InferOutput& o : outputs) bytes += o.data.size() + o.name.size() + o.shape.size() * sizeof(int64_t);
  return bytes;
}

// Feeds a length first, so that "ab"+"c" and "a"+"bc" differ.
void Feed(EVP_MD_CTX* ctx, const void* data, uint64_t size) {
  EVP_DigestUpdate(ctx, &size, sizeof size);
  EVP_DigestUpdate(ctx, data, size);
}

void Feed(EVP_MD_CTX* ctx, const std::string& text) { Feed(ctx, text.data(), text.size()); }

}  // namespace

std::string ResponseCache::KeyOf(const ModelConfig& model, int64_t version, const InferRequest& request) {
  // OpenSSL 3 looks an algorithm up (under a global lock) each time it is
  // named: fetched once; and one context per thread, reset for each key.
  static EVP_MD* const sha256 = EVP_MD_fetch(nullptr, "SHA256", nullptr);
  thread_local const std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> context(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  EVP_MD_CTX* ctx = context.get();
  if (sha256 == nullptr || ctx == nullptr || EVP_DigestInit_ex(ctx, sha256, nullptr) != 1) return "";
  Feed(ctx, model.HostKey());
  Feed(ctx, &version, sizeof version);
  // Inputs in the model's config order; by position, not name, so an
  // ensemble's member call (with the ensemble's input names) and a direct
  // call of the member share a key.
  for (const InferInput& in : request.inputs) {
    // Still in a client's region (OwnInputs was not called): its bytes
    // could change before they are read for the host, so no key.
    if (in.data == nullptr && in.bytes > 0) return "";
    const auto datatype = static_cast<int32_t>(in.datatype);
    Feed(ctx, &datatype, sizeof datatype);
    Feed(ctx, in.shape.data(), in.shape.size() * sizeof(int64_t));
    Feed(ctx, in.data, in.bytes);
  }
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  if (EVP_DigestFinal_ex(ctx, digest, &size) != 1) return "";
  return std::string(reinterpret_cast<const char*>(digest), size);
}

Status ResponseCache::OwnInputs(InferRequest* request) {
  for (InferInput& in : request->inputs) {
    if (in.data != nullptr || in.bytes == 0 || !in.read_into) continue;
    auto copy = std::make_unique<uint8_t[]>(in.bytes);
    ES_RETURN_IF_ERROR(in.read_into(copy.get()));
    in.data = copy.get();
    in.read_into = nullptr;
    request->shm_scratch.push_back(std::move(copy));
  }
  return Status::Ok();
}

std::optional<std::vector<InferOutput>> ResponseCache::Lookup(const std::string& key, const std::string& model,
                                                              uint64_t* generation) {
  MutexLock lock(&mu_);
  auto it = index_.find(key);
  if (it == index_.end()) {
    ++figures_.misses;
    auto g = generations_.find(model);
    *generation = g == generations_.end() ? 0 : g->second;
    return std::nullopt;
  }
  ++figures_.hits;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->outputs;
}

void ResponseCache::Insert(const std::string& key, const std::string& model, uint64_t generation,
                           const std::vector<InferOutput>& outputs) {
  const uint64_t bytes = BytesOf(model, outputs) + key.size();
  if (bytes > capacity_) return;
  MutexLock lock(&mu_);
  auto g = generations_.find(model);
  if ((g == generations_.end() ? 0 : g->second) != generation) return;  // erased since the lookup
  if (index_.count(key) != 0) return;  // two misses of one key raced: the first kept
  while (!lru_.empty() && figures_.bytes + bytes > capacity_) {
    EvictLocked(std::prev(lru_.end()));
    ++figures_.evictions;
  }
  lru_.push_front(Entry{key, model, outputs, bytes});
  index_.emplace(key, lru_.begin());
  figures_.bytes += bytes;
  ++figures_.entries;
  ++figures_.insertions;
}

void ResponseCache::EraseModel(const std::string& model) {
  MutexLock lock(&mu_);
  ++generations_[model];
  for (auto it = lru_.begin(); it != lru_.end();) {
    auto next = std::next(it);
    if (it->model == model) EvictLocked(it);
    it = next;
  }
}

void ResponseCache::EvictLocked(Lru::iterator it) {
  figures_.bytes -= it->bytes;
  --figures_.entries;
  index_.erase(it->key);
  lru_.erase(it);
}

ResponseCache::Figures ResponseCache::figures() const {
  MutexLock lock(&mu_);
  return figures_;
}

}  // namespace es
