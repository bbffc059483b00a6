#include "server/port_check.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/errno_text.h"

namespace es {

Status CheckCanListen(const std::string& address, int port, const std::string& what) {
  if (port == 0) return Status::Ok();
  std::string where = address;
  where.push_back(':');
  where.append(std::to_string(port));
  const std::string prefix = "cannot listen for " + what + " on " + where + ": ";
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  // gRPC's form of an IPv6 address is bracketed ("[::1]"); getaddrinfo's is not.
  std::string host = address;
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  // "0.0.0.0" and "::" are addresses too; a name (localhost) is resolved.
  if (const int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &found); rc != 0) {
    return Status::Unavailable(prefix + gai_strerror(rc));
  }
  Status result = Status::Ok();
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    // As the real listeners do: a port in TIME_WAIT is usable, one with a listener is not.
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0) {
      const int err = errno;
      std::string why = err == EADDRINUSE ? "address already in use" : es::ErrnoText(err);
      if (err == EACCES) why += " (ports below 1024 need privileges)";
      result = Status::Unavailable(prefix + why);
    }
    close(fd);
    if (!result.ok()) break;
  }
  freeaddrinfo(found);
  return result;
}

}  // namespace es
