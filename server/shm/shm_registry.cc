#include "server/shm/shm_registry.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <utility>

#include "common/checked_math.h"
#include "common/errno_text.h"

namespace es {

// A registered region, or a view of one made by Open (an output's place):
// [object_offset, object_offset + byte_size) of the object behind `file`.
class SharedMemoryRegistry::Region {
 public:
  // The descriptor opened at registration, shared by the region and every
  // view of it: closed when the last of them goes, so a request that holds a
  // view of an unregistered region still writes to an open descriptor.
  struct Descriptor {
    explicit Descriptor(int fd) : fd(fd) {}
    ~Descriptor() { ::close(fd); }
    Descriptor(const Descriptor&) = delete;
    Descriptor& operator=(const Descriptor&) = delete;
    const int fd;
  };

  std::string name;
  std::string key;
  std::shared_ptr<const Descriptor> file;
  uint64_t object_offset = 0;  // < 2^63: inside an object whose size is an off_t
  uint64_t byte_size = 0;
};

namespace {

constexpr size_t kMaxNameBytes = 256;

// A name or key as a message shows it (a lookup's name has not been
// checked against kMaxNameBytes: ShownClientText cuts it).
std::string Quoted(const std::string& s) {
  std::string out = "'";
  out += ShownClientText(s);
  out.push_back('\'');
  return out;
}

// shm_open's rules (glibc): one optional leading '/', then a file name of
// the shared-memory filesystem: no further '/', not "." or "..", at most
// NAME_MAX bytes. An embedded NUL would make c_str() name another object.
Status CheckKey(const std::string& key) {
  const std::string where = "shared-memory key " + Quoted(key) + ": ";
  if (key.find('\0') != std::string::npos) return Status::InvalidArgument(where + "contains a NUL byte");
  const std::string file = key.empty() || key[0] != '/' ? key : key.substr(1);
  if (file.empty()) return Status::InvalidArgument(where + "is empty (expected e.g. \"/my_region\")");
  if (file.find('/') != std::string::npos) {
    return Status::InvalidArgument(where + "has a '/' after the leading one (expected e.g. \"/my_region\")");
  }
  if (file == "." || file == "..") return Status::InvalidArgument(where + "is not an object name");
  if (file.size() > NAME_MAX) {
    std::string m = where + "is longer than ";
    m += std::to_string(NAME_MAX);
    m += " bytes";
    return Status::InvalidArgument(std::move(m));
  }
  return Status::Ok();
}

// Reads `bytes` at `offset`; the count read (short only at the object's end).
StatusOr<uint64_t> PreadFull(int fd, uint8_t* dest, uint64_t bytes, uint64_t offset) {
  uint64_t done = 0;
  while (done < bytes) {
    const ssize_t n = ::pread(fd, dest + done, bytes - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::Internal("pread: " + ErrnoText(errno));
    }
    if (n == 0) break;  // the object ends here
    done += static_cast<uint64_t>(n);
  }
  return done;
}

Status PwriteFull(int fd, const char* data, uint64_t bytes, uint64_t offset) {
  uint64_t done = 0;
  while (done < bytes) {
    const ssize_t n = ::pwrite(fd, data + done, bytes - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::Internal("pwrite: " + ErrnoText(errno));
    }
    if (n == 0) return Status::Internal("pwrite wrote nothing");
    done += static_cast<uint64_t>(n);
  }
  return Status::Ok();
}

// "region 'r' (N bytes): offset O + B bytes is outside it"
Status OutsideRegion(const std::string& name, uint64_t region_bytes, uint64_t offset, uint64_t bytes) {
  std::string m = "shared-memory region " + Quoted(name) + " (";
  m += std::to_string(region_bytes);
  m += " bytes): offset ";
  m += std::to_string(offset);
  m += " + ";
  m += std::to_string(bytes);
  m += " bytes is outside it";
  return Status::InvalidArgument(std::move(m));
}

// The object no longer holds what the region needs (the client shrank it).
Status ObjectShrank(const SharedMemoryRegistry::Region& region, uint64_t object_offset, uint64_t bytes,
                    uint64_t available) {
  std::string m = "shared-memory region " + Quoted(region.name) + ": its object " + Quoted(region.key) + " ends ";
  m += std::to_string(available);
  m += " bytes into the ";
  m += std::to_string(bytes);
  m += " bytes at object offset ";
  m += std::to_string(object_offset);
  m += " (it was truncated after registration)";
  return Status::InvalidArgument(std::move(m));
}

}  // namespace

SharedMemoryRegistry::SharedMemoryRegistry() = default;
SharedMemoryRegistry::~SharedMemoryRegistry() = default;

Status SharedMemoryRegistry::Register(const std::string& name, const std::string& key, uint64_t offset,
                                      uint64_t byte_size) {
  if (name.empty()) return Status::InvalidArgument("shared-memory region name is empty");
  if (name.size() > kMaxNameBytes) {
    std::string m = "shared-memory region name is longer than ";
    m += std::to_string(kMaxNameBytes);
    m += " bytes";
    return Status::InvalidArgument(std::move(m));
  }
  const std::string where = "shared-memory region " + Quoted(name) + ": ";
  ES_RETURN_IF_ERROR(CheckKey(key));
  if (byte_size == 0) return Status::InvalidArgument(where + "byte_size is 0");
  {
    MutexLock lock(&mu_);
    if (regions_.count(name)) return Status(StatusCode::kAlreadyExists, where + "is already registered");
  }
  // Opened outside the lock: a slow filesystem does not stall every request.
  // glibc's shm_open adds O_NOFOLLOW and O_CLOEXEC: a symbolic link is refused.
  const int fd = ::shm_open(key.c_str(), O_RDWR, 0);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return Status::NotFound(where + "no shared-memory object " + Quoted(key) + " exists");
    std::string m = where + "cannot open shared-memory object " + Quoted(key) + " for reading and writing: ";
    m += err == ELOOP ? "it is a symbolic link" : ErrnoText(err);
    return Status::InvalidArgument(std::move(m));
  }
  auto file = std::make_shared<const Region::Descriptor>(fd);
  struct stat st {};
  if (::fstat(fd, &st) != 0) return Status::Internal(where + "fstat: " + ErrnoText(errno));
  if (!S_ISREG(st.st_mode)) {
    return Status::InvalidArgument(where + "shared-memory object " + Quoted(key) + " is not a regular file");
  }
  const uint64_t object_bytes = st.st_size > 0 ? static_cast<uint64_t>(st.st_size) : 0;
  if (!RangeInside(offset, byte_size, 0, object_bytes)) {
    std::string m = where + "offset ";
    m += std::to_string(offset);
    m += " + byte_size ";
    m += std::to_string(byte_size);
    m += " is outside its object " + Quoted(key) + " of ";
    m += std::to_string(object_bytes);
    m += " bytes";
    return Status::InvalidArgument(std::move(m));
  }
  auto region = std::make_shared<Region>();
  region->name = name;
  region->key = key;
  region->file = std::move(file);
  region->object_offset = offset;
  region->byte_size = byte_size;
  MutexLock lock(&mu_);
  if (regions_.count(name)) return Status(StatusCode::kAlreadyExists, where + "is already registered");
  if (regions_.size() >= kMaxRegions) {
    std::string m = where + "cannot be registered: ";
    m += std::to_string(kMaxRegions);
    m += " regions are registered already (the most the server holds); unregister some first";
    return Status::ResourceExhausted(std::move(m));
  }
  regions_.emplace(name, std::move(region));
  return Status::Ok();
}

Status SharedMemoryRegistry::Unregister(const std::string& name) {
  std::shared_ptr<Region> gone;  // closed (if unused) after the lock is released
  MutexLock lock(&mu_);
  auto it = regions_.find(name);
  if (it == regions_.end()) {
    return Status::NotFound("shared-memory region " + Quoted(name) + " is not registered");
  }
  gone = std::move(it->second);
  regions_.erase(it);
  return Status::Ok();
}

void SharedMemoryRegistry::UnregisterAll() {
  std::map<std::string, std::shared_ptr<Region>> gone;
  MutexLock lock(&mu_);
  gone.swap(regions_);
}

StatusOr<std::vector<SharedMemoryRegistry::RegionInfo>> SharedMemoryRegistry::List(const std::string& name) const {
  std::vector<RegionInfo> out;
  MutexLock lock(&mu_);
  for (const auto& [n, region] : regions_) {
    if (!name.empty() && n != name) continue;
    out.push_back({region->name, region->key, region->object_offset, region->byte_size});
  }
  if (!name.empty() && out.empty()) {
    return Status::NotFound("shared-memory region " + Quoted(name) + " is not registered");
  }
  return out;
}

StatusOr<std::shared_ptr<SharedMemoryRegistry::Region>> SharedMemoryRegistry::Find(const std::string& name) const {
  MutexLock lock(&mu_);
  auto it = regions_.find(name);
  if (it == regions_.end()) {
    return Status::NotFound("shared-memory region " + Quoted(name) + " is not registered");
  }
  return it->second;
}

Status SharedMemoryRegistry::ReadInto(const std::string& name, uint64_t offset, uint64_t bytes, void* dest) const {
  ES_ASSIGN_OR_RETURN(std::shared_ptr<Region> found, Find(name));
  const Region& region = *found;
  if (!RangeInside(offset, bytes, 0, region.byte_size)) return OutsideRegion(name, region.byte_size, offset, bytes);
  // Cannot wrap: object_offset + byte_size was inside the object's off_t size.
  const uint64_t at = region.object_offset + offset;
  StatusOr<uint64_t> got = PreadFull(region.file->fd, static_cast<uint8_t*>(dest), bytes, at);
  if (!got.ok()) return Status::Internal("shared-memory region " + Quoted(name) + ": " + got.status().message());
  if (*got < bytes) return ObjectShrank(region, at, bytes, *got);
  return Status::Ok();
}

StatusOr<std::string> SharedMemoryRegistry::Read(const std::string& name, uint64_t offset, uint64_t bytes) const {
  // The range is checked before the buffer is made: a huge `bytes` outside
  // the region must not allocate anything.
  {
    ES_ASSIGN_OR_RETURN(std::shared_ptr<Region> found, Find(name));
    if (!RangeInside(offset, bytes, 0, found->byte_size)) {
      return OutsideRegion(name, found->byte_size, offset, bytes);
    }
  }
  std::string out(bytes, '\0');
  ES_RETURN_IF_ERROR(ReadInto(name, offset, bytes, out.data()));
  return out;
}

StatusOr<std::shared_ptr<SharedMemoryRegistry::Region>> SharedMemoryRegistry::Open(const std::string& name,
                                                                                   uint64_t offset,
                                                                                   uint64_t capacity) const {
  ES_ASSIGN_OR_RETURN(std::shared_ptr<Region> found, Find(name));
  const Region& region = *found;
  if (!RangeInside(offset, capacity, 0, region.byte_size)) {
    return OutsideRegion(name, region.byte_size, offset, capacity);
  }
  auto view = std::make_shared<Region>();
  view->name = region.name;
  view->key = region.key;
  view->file = region.file;
  view->object_offset = region.object_offset + offset;
  view->byte_size = capacity;
  return view;
}

uint64_t SharedMemoryRegistry::Capacity(const Region& region) { return region.byte_size; }

Status SharedMemoryRegistry::ReadAll(const Region& region, void* dest) {
  StatusOr<uint64_t> got = PreadFull(region.file->fd, static_cast<uint8_t*>(dest), region.byte_size,
                                     region.object_offset);
  if (!got.ok()) return Status::Internal("shared-memory region " + Quoted(region.name) + ": " + got.status().message());
  if (*got < region.byte_size) return ObjectShrank(region, region.object_offset, region.byte_size, *got);
  return Status::Ok();
}

Status SharedMemoryRegistry::Write(const Region& region, const std::string& data) {
  if (data.size() > region.byte_size) {
    std::string m = "shared-memory region " + Quoted(region.name) + ": ";
    m += std::to_string(data.size());
    m += " bytes do not fit the ";
    m += std::to_string(region.byte_size);
    m += " bytes given";
    return Status::InvalidArgument(std::move(m));
  }
  // pwrite past the end would grow a shrunk object back instead of failing:
  // check the size first. A truncation racing this check at worst makes the
  // write grow the client's object again; it never faults the router.
  struct stat st {};
  if (::fstat(region.file->fd, &st) != 0) {
    return Status::Internal("shared-memory region " + Quoted(region.name) + ": fstat: " + ErrnoText(errno));
  }
  const uint64_t object_bytes = st.st_size > 0 ? static_cast<uint64_t>(st.st_size) : 0;
  if (!RangeInside(region.object_offset, data.size(), 0, object_bytes)) {
    const uint64_t available = object_bytes > region.object_offset ? object_bytes - region.object_offset : 0;
    return ObjectShrank(region, region.object_offset, data.size(), available);
  }
  Status written = PwriteFull(region.file->fd, data.data(), data.size(), region.object_offset);
  if (!written.ok()) return Status::Internal("shared-memory region " + Quoted(region.name) + ": " + written.message());
  return Status::Ok();
}

}  // namespace es
