// Helpers for bootstrap tests: ranks as threads of this process.
#pragma once

#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "bootstrap/bootstrap.h"
#include "bootstrap/socket.h"
#include "common/deadline.h"
#include "../../common/scoped_env.h"

namespace theseus::bootstrap::testing {

using ::theseus::test::ScopedEnv;

struct Made {
  std::vector<std::unique_ptr<Bootstrap>> comms;  // by rank (null where creation failed)
  std::vector<Status> status;                     // by rank
  double seconds = 0;
};

// Creates `ranks` of an `nranks` communicator concurrently (one thread each) from one unique id.
inline Made makeRanks(const ncclUniqueId& id, int nranks, const std::vector<int>& ranks,
                      const std::vector<InitOptions>& options = {}) {
  Made m;
  m.comms.resize(nranks);
  m.status.resize(nranks);
  auto start = Clock::now();
  std::vector<std::thread> threads;
  for (int r : ranks) {
    threads.emplace_back([&, r] {
      InitOptions o = options.empty() ? InitOptions{} : options[r];
      auto b = createFromUniqueIds(&id, 1, r, nranks, o);
      m.status[r] = b.status();
      if (b.isOk()) m.comms[r] = b.take();
    });
  }
  for (auto& t : threads) t.join();
  m.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return m;
}

inline Made makeComm(int nranks) {
  ncclUniqueId id;
  EXPECT_TRUE(createUniqueId(&id).isOk());
  std::vector<int> all;
  for (int r = 0; r < nranks; ++r) all.push_back(r);
  Made m = makeRanks(id, nranks, all);
  for (int r = 0; r < nranks; ++r) EXPECT_TRUE(m.status[r].isOk()) << "rank " << r << ": " << m.status[r].message();
  return m;
}

// Polls `cond` for up to `ms`.
template <typename F>
bool eventually(F cond, int ms = 5000) {
  auto end = Clock::now() + std::chrono::milliseconds(ms);
  while (Clock::now() < end) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return cond();
}

// A plain blocking TCP connection to "ip:port".
// A loopback address whose port was free a moment ago (for NCCL_COMM_ID).
inline SockAddr freeLoopbackAddress() {
  SockAddr bound;
  auto l = listenOn(SockAddr::parse("127.0.0.1:0").value(), &bound);
  EXPECT_TRUE(l.isOk());
  if (l.isOk()) ::close(l.value());
  return bound;
}

inline int rawConnect(const std::string& address) {
  auto addr = SockAddr::parse(address);
  EXPECT_TRUE(addr.isOk()) << address;
  auto fd = connectTo(addr.value(), Wait::forMs(5000), "test peer");
  EXPECT_TRUE(fd.isOk()) << fd.status().message();
  return fd.isOk() ? fd.value() : -1;
}

}  // namespace theseus::bootstrap::testing
