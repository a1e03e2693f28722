// FdMailbox (transport/shm/fd_mailbox.h): descriptors passed between ranks
// over abstract datagram sockets. What arrives is the same open file, a full
// queue makes the sender keep its descriptor and retry, older generations of
// an entry are closed when a newer one is taken, and messages that are not for
// this communicator are dropped with their descriptors.
#include "transport/shm/fd_mailbox.h"

#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

namespace theseus::transport {
namespace {

constexpr uint64_t kComm = 0x1234abcd5678ef00ull;

// A memfd holding `text`.
int fileWith(const std::string& text) {
  int fd = memfd_create("fd-mailbox-test", MFD_CLOEXEC);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  return fd;
}

std::string contentsOf(int fd) {
  char buf[64] = {};
  ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

bool isOpen(int fd) { return fcntl(fd, F_GETFD) != -1; }

TEST(FdMailbox, PassesTheSameFileAndRetriesWhenTheQueueIsFull) {
  auto a = FdMailbox::open(kComm, 0);
  auto b = FdMailbox::open(kComm, 1);
  ASSERT_TRUE(a.isOk()) << a.status().message();
  ASSERT_TRUE(b.isOk()) << b.status().message();
  // Sending until the receiver's queue is full (Linux: net.unix.max_dgram_qlen datagrams).
  std::vector<int> files;
  uint32_t sent = 0;
  bool full = false;
  for (uint32_t e = 0; e < 600 && !full; ++e) {
    files.push_back(fileWith("entry " + std::to_string(e)));
    auto r = a.value()->send(1, FdMailbox::Note{0, e, 7, 4096 + e}, files.back());
    ASSERT_TRUE(r.isOk()) << r.status().message();
    if (r.value()) ++sent;
    else full = true;
  }
  ASSERT_GT(sent, 0u);
  printf("%u descriptors queued before the receiver's queue was %s\n", sent, full ? "full" : "never full");
  // Taken in any order: the same files (what was written is there), with the size noted.
  for (uint32_t e = sent; e-- > 0;) {
    uint64_t bytes = 0;
    const int fd = b.value()->take(0, e, 7, &bytes);
    ASSERT_GE(fd, 0) << "entry " << e;
    EXPECT_EQ(contentsOf(fd), "entry " + std::to_string(e));
    EXPECT_EQ(bytes, 4096u + e);
    close(fd);
  }
  if (full) {  // drained: the refused one goes now
    auto r = a.value()->send(1, FdMailbox::Note{0, sent, 7, 1}, files.back());
    ASSERT_TRUE(r.isOk());
    EXPECT_TRUE(r.value());
    const int fd = b.value()->take(0, sent, 7, nullptr);
    EXPECT_EQ(contentsOf(fd), "entry " + std::to_string(sent));
    close(fd);
  }
  for (int fd : files) close(fd);
  EXPECT_EQ(b.value()->take(0, 0, 7, nullptr), -1);  // nothing more
}

TEST(FdMailbox, NewerGenerationsReplaceOlderOnes) {
  auto a = FdMailbox::open(kComm + 1, 0);
  auto b = FdMailbox::open(kComm + 1, 1);
  ASSERT_TRUE(a.isOk() && b.isOk());
  const int old = fileWith("old"), fresh = fileWith("new"), later = fileWith("later");
  ASSERT_TRUE(a.value()->send(1, FdMailbox::Note{0, 3, 1, 0}, old).value());
  ASSERT_TRUE(a.value()->send(1, FdMailbox::Note{0, 3, 2, 0}, fresh).value());
  ASSERT_TRUE(a.value()->send(1, FdMailbox::Note{0, 3, 5, 0}, later).value());
  const int got = b.value()->take(0, 3, 2, nullptr);  // generation 1 is closed, 5 is kept for later
  EXPECT_EQ(contentsOf(got), "new");
  EXPECT_EQ(b.value()->take(0, 3, 1, nullptr), -1);
  const int after = b.value()->take(0, 3, 5, nullptr);
  EXPECT_EQ(contentsOf(after), "later");
  for (int fd : {old, fresh, later, got, after}) close(fd);
}

TEST(FdMailbox, DropsWhatIsNotForThisCommunicator) {
  auto a = FdMailbox::open(kComm + 2, 0);
  auto b = FdMailbox::open(kComm + 2, 1);
  auto other = FdMailbox::open(kComm + 3, 0);
  ASSERT_TRUE(a.isOk() && b.isOk() && other.isOk());
  // Garbage without a descriptor, straight to rank 1's address.
  int raw = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(raw, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  char name[64];
  snprintf(name, sizeof(name), "theseus-%016llx-r1-fd", static_cast<unsigned long long>(kComm + 2));
  memcpy(addr.sun_path + 1, name, strlen(name));
  const char junk[] = "not a note";
  ASSERT_EQ(sendto(raw, junk, sizeof(junk), 0, reinterpret_cast<sockaddr*>(&addr),
                   static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + strlen(name))),
            static_cast<ssize_t>(sizeof(junk)));
  close(raw);
  EXPECT_EQ(b.value()->take(0, 0, 1, nullptr), -1);
  // A real note, then one for rank 1 of another communicator (it has no mailbox: an error, nothing lost).
  const int f = fileWith("ok");
  ASSERT_TRUE(a.value()->send(1, FdMailbox::Note{0, 0, 1, 0}, f).value());
  EXPECT_FALSE(other.value()->send(1, FdMailbox::Note{0, 0, 1, 0}, f).isOk());
  const int got = b.value()->take(0, 0, 1, nullptr);
  EXPECT_EQ(contentsOf(got), "ok");
  EXPECT_TRUE(isOpen(f));
  close(got);
  close(f);
}

TEST(FdMailbox, OneMailboxPerRankAndCommunicator) {
  auto a = FdMailbox::open(kComm + 4, 0);
  ASSERT_TRUE(a.isOk());
  auto again = FdMailbox::open(kComm + 4, 0);
  ASSERT_FALSE(again.isOk());
  EXPECT_NE(again.status().message().find("mailbox"), std::string::npos) << again.status().message();
}

}  // namespace
}  // namespace theseus::transport
