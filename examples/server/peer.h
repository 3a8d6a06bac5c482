// Whether the client of a request is still connected, for a response written only at its end
// (not streamed): httplib 0.11 gives a handler neither its socket nor a way to see the peer
// close. The socket is found once by the connection's two endpoints among the process's
// descriptors (Linux: /proc/self/fd), then polled for the peer's hang-up before each token.
//
//   PeerWatch peer(req.local_addr, req.local_port, req.remote_addr, req.remote_port);
//   ... if (peer.Gone()) stop generating ...
#pragma once

#include <string>

namespace kx::server {

class PeerWatch {
 public:
  PeerWatch(const std::string& local_addr, int local_port, const std::string& remote_addr,
            int remote_port);
  // True once the peer closed or reset the connection. False while it is open, and always
  // when the socket was not found (nothing is stopped on a guess).
  bool Gone() const;
  bool found() const { return fd_ >= 0; }

 private:
  int fd_ = -1;  // not owned: httplib closes it after the response
};

}  // namespace kx::server
