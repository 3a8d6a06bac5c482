// PeerWatch (see peer.h).
#include "server/peer.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <cstdlib>

namespace kx::server {
namespace {

// "address:port" of a socket address, as httplib writes Request::remote_addr/local_addr.
bool Endpoint(const sockaddr_storage& sa, std::string* addr, int* port) {
  char text[INET6_ADDRSTRLEN] = {};
  if (sa.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&sa);
    if (inet_ntop(AF_INET, &in->sin_addr, text, sizeof text) == nullptr) return false;
    *port = ntohs(in->sin_port);
  } else if (sa.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&sa);
    if (inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof text) == nullptr) return false;
    *port = ntohs(in6->sin6_port);
  } else {
    return false;
  }
  *addr = text;
  return true;
}

}  // namespace

PeerWatch::PeerWatch(const std::string& local_addr, int local_port, const std::string& remote_addr,
                     int remote_port) {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return;
  while (const dirent* entry = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || fd == dirfd(dir)) continue;
    sockaddr_storage local{}, remote{};
    socklen_t local_len = sizeof local, remote_len = sizeof remote;
    if (getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&local), &local_len) != 0 ||
        getpeername(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&remote), &remote_len) != 0) {
      continue;  // not a connected socket
    }
    std::string la, ra;
    int lp = 0, rp = 0;
    if (Endpoint(local, &la, &lp) && Endpoint(remote, &ra, &rp) && lp == local_port &&
        rp == remote_port && la == local_addr && ra == remote_addr) {
      fd_ = static_cast<int>(fd);
      break;
    }
  }
  closedir(dir);
}

bool PeerWatch::Gone() const {
  if (fd_ < 0) return false;
  pollfd p{};
  p.fd = fd_;
  p.events = POLLRDHUP;
  return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

}  // namespace kx::server
