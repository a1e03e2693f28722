#include "fake_bootstrap.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>

namespace theseus::testing {

namespace {
constexpr size_t kMaxContribution = 64 << 10;
constexpr int kMaxRanks = 64;
constexpr uint64_t kConnMagic = 0xfa4eb007c0ffee11ull;

struct ConnHeader {
  uint64_t magic;
  int32_t rank;
  uint32_t tag;
};
}  // namespace

struct FakeWorld::Shared {
  std::atomic<uint32_t> arrived;
  std::atomic<uint32_t> generation;
  std::atomic<int32_t> pids[kMaxRanks];
  uint32_t lengths[2][kMaxRanks];
  char data[2][kMaxRanks][kMaxContribution];
};

std::unique_ptr<FakeWorld> FakeWorld::create(int nranks, std::vector<uint64_t> hostHashes) {
  if (nranks < 1 || nranks > kMaxRanks) return nullptr;
  std::unique_ptr<FakeWorld> w(new FakeWorld());
  w->nranks_ = nranks;
  std::random_device rd;
  w->commHash_ = (static_cast<uint64_t>(rd()) << 32) | rd();
  if (hostHashes.empty()) hostHashes.assign(nranks, 0x1234);
  w->hostHashes_ = hostHashes;
  w->sharedBytes_ = sizeof(Shared);
  void* p = mmap(nullptr, w->sharedBytes_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  w->shared_ = new (p) Shared();
  for (int r = 0; r < nranks; ++r) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    socklen_t len = sizeof(a);
    if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || listen(fd, 256) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0)
      return nullptr;
    w->listenFds_.push_back(fd);
    w->ports_.push_back(ntohs(a.sin_port));
  }
  return w;
}

FakeWorld::~FakeWorld() {
  for (int fd : listenFds_) close(fd);
  if (shared_ != nullptr) munmap(shared_, sharedBytes_);
}

class FakeBootstrap final : public bootstrap::Bootstrap {
 public:
  FakeBootstrap(FakeWorld* w, int rank) : w_(w), rank_(rank) {
    w_->shared_->pids[rank].store(getpid());
    for (int r = 0; r < w->nranks_; ++r) {
      bootstrap::PeerInfo info;
      info.rank = r;
      info.hostHash = w->hostHashes_[r];
      info.hostname = "fakehost-" + std::to_string(w->hostHashes_[r]);
      info.listenAddress = "127.0.0.1:" + std::to_string(w->ports_[r]);
      peers_.push_back(info);
      if (w->hostHashes_[r] == w->hostHashes_[rank]) {
        if (r == rank) localRank_ = static_cast<int>(local_.size());
        local_.push_back(r);
      }
    }
  }

  int rank() const override { return rank_; }
  int nranks() const override { return w_->nranks_; }
  uint64_t commHash() const override { return w_->commHash_; }
  const std::vector<bootstrap::PeerInfo>& peers() const override {
    for (auto& p : peers_) p.pid = w_->shared_->pids[p.rank].load();
    return peers_;
  }
  const std::vector<int>& localRanks() const override { return local_; }
  int localRank() const override { return localRank_; }
  int nodeCount() const override {
    std::vector<uint64_t> h = w_->hostHashes_;
    std::sort(h.begin(), h.end());
    return static_cast<int>(std::unique(h.begin(), h.end()) - h.begin());
  }

  Status allGather(const std::string& mine, std::vector<std::string>* all) override {
    if (mine.size() > kMaxContribution) return invalidArgument("fake allGather: contribution too large");
    int parity = static_cast<int>(round_++ & 1);
    auto* s = w_->shared_;
    memcpy(s->data[parity][rank_], mine.data(), mine.size());
    s->lengths[parity][rank_] = static_cast<uint32_t>(mine.size());
    TH_CHECK(barrier());
    all->clear();
    for (int r = 0; r < w_->nranks_; ++r) all->emplace_back(s->data[parity][r], s->lengths[parity][r]);
    return Status::ok();
  }

  Status barrier() override {
    auto* s = w_->shared_;
    uint32_t gen = s->generation.load(std::memory_order_acquire);
    if (s->arrived.fetch_add(1, std::memory_order_acq_rel) + 1 == static_cast<uint32_t>(w_->nranks_)) {
      s->arrived.store(0, std::memory_order_relaxed);
      s->generation.fetch_add(1, std::memory_order_acq_rel);
      return Status::ok();
    }
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (s->generation.load(std::memory_order_acquire) == gen) {
      if (std::chrono::steady_clock::now() > deadline) return remoteError("fake barrier: timed out (rank %d)", rank_);
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    return Status::ok();
  }

  void setHandler(bootstrap::MsgType, Handler) override {}
  Status sendToLeader(bootstrap::MsgType, std::string_view) override { return internalError("not in the fake"); }
  Status sendToRank(int, bootstrap::MsgType, std::string_view) override { return internalError("not in the fake"); }
  void setPeerFailureCallback(std::function<void(int, const Status&)>, FailureListener) override {}
  std::vector<int> failedRanks() const override { return {}; }

  Result<int> connectTo(int peer, uint32_t tag, Deadline) override {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(w_->ports_[peer]));
    if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
      int e = errno;
      if (fd >= 0) ::close(fd);
      return errnoStatus(e, "fake connectTo rank %d", peer);
    }
    ConnHeader h{kConnMagic, rank_, tag};
    if (write(fd, &h, sizeof(h)) != static_cast<ssize_t>(sizeof(h))) {
      ::close(fd);
      return systemError("fake connectTo: header write failed");
    }
    return fd;
  }

  Result<int> acceptFrom(int peer, uint32_t tag, Deadline deadline) override {
    std::lock_guard lock(mu_);
    for (;;) {
      auto it = parked_.find({peer, tag});
      if (it != parked_.end()) {
        int fd = it->second;
        parked_.erase(it);
        return fd;
      }
      if (deadline.expired()) return remoteError("fake acceptFrom: timed out waiting for rank %d tag %x", peer, tag);
      pollfd p = {w_->listenFds_[rank_], POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(deadline.remainingMs(10))) <= 0) continue;
      int fd = accept4(w_->listenFds_[rank_], nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) continue;  // another thread of this rank took it
      int flags = fcntl(fd, F_GETFL);
      fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
      timeval tv{2, 0};
      setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
      ConnHeader h{};
      if (recv(fd, &h, sizeof(h), MSG_WAITALL) != static_cast<ssize_t>(sizeof(h)) || h.magic != kConnMagic) {
        ::close(fd);
        continue;
      }
      timeval none{0, 0};
      setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &none, sizeof(none));
      parked_.emplace(std::make_pair(static_cast<int>(h.rank), h.tag), fd);
    }
  }

  void close() override {}
  ~FakeBootstrap() override {
    for (auto& [k, fd] : parked_) ::close(fd);
  }

 private:
  FakeWorld* w_;
  int rank_;
  mutable std::vector<bootstrap::PeerInfo> peers_;
  std::vector<int> local_;
  int localRank_ = 0;
  uint64_t round_ = 0;
  std::mutex mu_;
  std::multimap<std::pair<int, uint32_t>, int> parked_;
};

std::unique_ptr<bootstrap::Bootstrap> FakeWorld::bootstrap(int rank) {
  return std::make_unique<FakeBootstrap>(this, rank);
}

void runThreads(int nranks, const std::function<void(int rank)>& fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < nranks; ++r) threads.emplace_back([&fn, r] { fn(r); });
  for (auto& t : threads) t.join();
}

std::vector<int> runProcesses(int nranks, const std::function<int(int rank)>& fn, int timeoutSec) {
  std::vector<pid_t> pids;
  for (int r = 0; r < nranks; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      int rc = fn(r);
      fflush(stdout);
      fflush(stderr);
      _exit(rc);
    }
    pids.push_back(pid);
  }
  std::vector<int> codes(nranks, -1);
  std::vector<bool> done(nranks, false);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeoutSec);
  int left = nranks;
  while (left > 0) {
    for (int r = 0; r < nranks; ++r) {
      if (done[r]) continue;
      int status = 0;
      if (waitpid(pids[r], &status, WNOHANG) == pids[r]) {
        done[r] = true;
        --left;
        codes[r] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
    }
    if (left > 0 && std::chrono::steady_clock::now() > deadline) {
      for (int r = 0; r < nranks; ++r)
        if (!done[r]) {
          kill(pids[r], SIGKILL);
          waitpid(pids[r], nullptr, 0);
          codes[r] = -1;
        }
      break;
    }
    if (left > 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return codes;
}

EnvGuard::EnvGuard(const char* name, const char* value) : name_(name) {
  const char* old = getenv(name);
  had_ = old != nullptr;
  if (had_) old_ = old;
  if (value != nullptr) setenv(name, value, 1);
  else unsetenv(name);
}

EnvGuard::~EnvGuard() {
  if (had_) setenv(name_.c_str(), old_.c_str(), 1);
  else unsetenv(name_.c_str());
}

}  // namespace theseus::testing
