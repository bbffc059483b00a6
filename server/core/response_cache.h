// ResponseCache: the answers of models with `response_cache: {enable: true}`
// (Triton's response cache), bounded by the server's
// `response_cache: {size_bytes: N}`, least recently used first out.
//
// Key: a SHA-256 digest of what decides an answer: the model's host key
// (its name, or "name@N" once a config change altered what its versions
// compute), the version, and every input's datatype, shape and bytes in the
// model's input order: a new version or config is a new key. The outputs a
// client asks for are not in it: the cache keeps every output, and the
// answer is trimmed to those asked for later, as any answer is. EraseModel
// drops a model's entries when it is (re)loaded (a version folder's
// model.pt replaced in place keeps its key), and an answer computed before
// that erase is not kept after it (the generation the lookup gave). An
// input in a client's shared-memory region is keyed only once the request
// owns a copy of it (OwnInputs, when the request arrives): the key and the
// host then read the same bytes, whatever the client writes into its
// region meanwhile (else one client could store an answer under another
// input's key). Ensembles are not cached themselves: their members are, so two
// ensembles sharing a member, or a cascade and its full ensemble, reuse one
// another's member answers.
//
// A hit costs a digest of the inputs and a copy of the outputs; a miss the
// digest, and on success a copy into the cache (evicting the least recently
// used entries to make room; an answer larger than the whole cache is not
// kept).
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/mutex.h"
#include "server/core/infer_types.h"

namespace es {

class ResponseCache {
 public:
  // Figures for metrics (cumulative counts; bytes and entries now).
  struct Figures {
    uint64_t hits = 0, misses = 0, insertions = 0, evictions = 0;
    uint64_t bytes = 0, entries = 0;
  };

  explicit ResponseCache(uint64_t capacity_bytes) : capacity_(capacity_bytes) {}

  // The key of `request` run on `model` (a model with its cache enabled)
  // at `version`; "" when it is not cached (an input still in a client's
  // shared-memory region).
  static std::string KeyOf(const ModelConfig& model, int64_t version, const InferRequest& request);
  // Copies the request's inputs that are in a client's shared-memory region
  // into the request (shm_scratch), so they are read once, for the key and
  // the host alike; an error when a region cannot be read.
  static Status OwnInputs(InferRequest* request);

  // The answer kept under `key` (most recently used from now), counted as a
  // hit; nullopt counted as a miss, with *generation set to the count of
  // EraseModel(model) calls so far, for the Insert of the miss's answer.
  std::optional<std::vector<InferOutput>> Lookup(const std::string& key, const std::string& model,
                                                 uint64_t* generation);
  // Keeps `outputs` under `key` for `model` (its name), unless the model's
  // entries were erased since the lookup that gave `generation`.
  void Insert(const std::string& key, const std::string& model, uint64_t generation,
              const std::vector<InferOutput>& outputs);
  // Drops every entry of `model` (its name).
  void EraseModel(const std::string& model);

  Figures figures() const;
  uint64_t capacity() const { return capacity_; }

 private:
  struct Entry {
    std::string key;
    std::string model;
    std::vector<InferOutput> outputs;
    uint64_t bytes = 0;
  };
  using Lru = std::list<Entry>;  // most recently used first
  void EvictLocked(Lru::iterator it) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const uint64_t capacity_;
  mutable Mutex mu_;
  Lru lru_ ABSL_GUARDED_BY(mu_);
  std::unordered_map<std::string, Lru::iterator> index_ ABSL_GUARDED_BY(mu_);
  std::unordered_map<std::string, uint64_t> generations_ ABSL_GUARDED_BY(mu_);  // by model name
  Figures figures_ ABSL_GUARDED_BY(mu_);
};

}  // namespace es
