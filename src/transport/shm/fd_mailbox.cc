// File descriptors between local processes over abstract datagram sockets (fd_mailbox.h).
#include "transport/shm/fd_mailbox.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "common/log.h"

namespace theseus::transport {
namespace {

constexpr uint64_t kMagic = 0x444658414d485454ull;  // "TTHMAXFD"

struct Wire {
  uint64_t magic;
  uint64_t commHash;
  FdMailbox::Note note;
};

// An abstract socket address: a leading NUL, then the name (not NUL-terminated).
socklen_t addressOf(const std::string& name, sockaddr_un* addr) {
  memset(addr, 0, sizeof(*addr));
  addr->sun_family = AF_UNIX;
  const size_t n = std::min(name.size(), sizeof(addr->sun_path) - 1);
  memcpy(addr->sun_path + 1, name.data(), n);
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
}

}  // namespace

std::string FdMailbox::nameOf(uint64_t commHash, int rank) {
  char name[64];
  snprintf(name, sizeof(name), "theseus-%016" PRIx64 "-r%d-fd", commHash, rank);
  return name;
}

Result<std::unique_ptr<FdMailbox>> FdMailbox::open(uint64_t commHash, int rank) {
  std::unique_ptr<FdMailbox> m(new FdMailbox());
  m->commHash_ = commHash;
  m->rank_ = rank;
  m->sock_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (m->sock_ < 0) return errnoStatus(errno, "socket(AF_UNIX) for passing file descriptors");
  sockaddr_un addr;
  const socklen_t len = addressOf(nameOf(commHash, rank), &addr);
  if (bind(m->sock_, reinterpret_cast<sockaddr*>(&addr), len) != 0)
    return errnoStatus(errno, "binding the file-descriptor mailbox %s", nameOf(commHash, rank).c_str());
  return m;
}

FdMailbox::~FdMailbox() {
  for (const Held& h : held_) close(h.fd);
  if (sock_ >= 0) close(sock_);
}

Result<bool> FdMailbox::send(int toRank, const Note& note, int fd) {
  Wire wire{kMagic, commHash_, note};
  iovec iov{&wire, sizeof(wire)};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  sockaddr_un addr;
  msghdr msg{};
  msg.msg_name = &addr;
  msg.msg_namelen = addressOf(nameOf(commHash_, toRank), &addr);
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(c), &fd, sizeof(int));
  for (;;) {
    if (sendmsg(sock_, &msg, MSG_DONTWAIT | MSG_NOSIGNAL) == static_cast<ssize_t>(sizeof(wire))) return true;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return false;
    return errnoStatus(errno, "passing a file descriptor to rank %d", toRank);
  }
}

void FdMailbox::drain() {
  for (;;) {
    Wire wire{};
    iovec iov{&wire, sizeof(wire)};
    alignas(cmsghdr) char control[CMSG_SPACE(4 * sizeof(int))] = {};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    const ssize_t n = recvmsg(sock_, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return;  // empty (or broken: nothing more to read)
    std::vector<int> fds;
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; ++i) {
        int fd;
        memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        fds.push_back(fd);
      }
    }
    const bool valid = n == static_cast<ssize_t>(sizeof(wire)) && wire.magic == kMagic &&
                       wire.commHash == commHash_ && fds.size() == 1 && (msg.msg_flags & MSG_CTRUNC) == 0;
    if (!valid) {
      TH_INFO(log::kShm, "rank %d's file-descriptor mailbox dropped a message that is not for it (%zd bytes, %zu "
              "descriptors)", rank_, n, fds.size());
      for (int fd : fds) close(fd);
      continue;
    }
    if (held_.size() >= kMaxHeld) {
      close(held_.front().fd);
      held_.erase(held_.begin());
    }
    held_.push_back(Held{wire.note, fds[0]});
  }
}

int FdMailbox::take(int fromRank, uint32_t entry, uint64_t generation, uint64_t* bytes) {
  drain();
  int fd = -1;
  for (auto it = held_.begin(); it != held_.end();) {
    if (it->note.fromRank != fromRank || it->note.entry != entry || it->note.generation > generation) {
      ++it;
      continue;
    }
    if (it->note.generation == generation && fd < 0) {
      fd = it->fd;
      if (bytes != nullptr) *bytes = it->note.bytes;
    } else {
      close(it->fd);  // an older generation of the entry, or a duplicate
    }
    it = held_.erase(it);
  }
  return fd;
}

}  // namespace theseus::transport
