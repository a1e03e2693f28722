// Kept apart from socket_io.cc: <linux/tcp.h> (which has the newer tcp_info
// fields) and glibc's <netinet/tcp.h> both define struct tcp_info.
#include "transport/socket/tcp_path_stats.h"

#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstddef>

namespace theseus::transport {

bool readTcpPathStats(int fd, TcpPathStats* out) {
  struct tcp_info ti = {};
  socklen_t len = sizeof(ti);
  if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0) return false;
  if (len < offsetof(struct tcp_info, tcpi_rwnd_limited) + sizeof(ti.tcpi_rwnd_limited)) return false;
  out->pathBusyUs = ti.tcpi_busy_time > ti.tcpi_rwnd_limited ? ti.tcpi_busy_time - ti.tcpi_rwnd_limited : 0;
  return true;
}

}  // namespace theseus::transport
