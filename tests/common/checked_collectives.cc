#include "checked_collectives.h"

#include <algorithm>

namespace theseus::test {

ncclResult_t checkedCollective(ncclComm_t comm, int rank, int nranks, std::mt19937_64& gen, std::vector<float>& a,
                               std::vector<float>& b, bool* wrong) {
  const size_t count = 1 + gen() % (a.size() / static_cast<size_t>(nranks));
  const int kind = static_cast<int>(gen() % 5);
  const float mine = static_cast<float>(rank + 1);
  const float sum = static_cast<float>(nranks * (nranks + 1) / 2);
  std::fill(a.begin(), a.begin() + static_cast<long>(count), mine);
  ncclResult_t r = ncclSuccess;
  auto expect = [&](size_t n, auto value) {
    for (size_t i = 0; i < n; ++i)
      if (b[i] != value(i)) {
        *wrong = true;
        return;
      }
  };
  switch (kind) {
    case 0:
      r = ncclAllReduce(a.data(), b.data(), count, ncclFloat, ncclSum, comm, nullptr);
      if (r == ncclSuccess) expect(count, [&](size_t) { return sum; });
      break;
    case 1:
      r = ncclAllGather(a.data(), b.data(), count, ncclFloat, comm, nullptr);
      if (r == ncclSuccess) expect(count * nranks, [&](size_t i) { return static_cast<float>(i / count + 1); });
      break;
    case 2:
      std::fill(a.begin(), a.begin() + static_cast<long>(count * nranks), mine);
      r = ncclReduceScatter(a.data(), b.data(), count, ncclFloat, ncclSum, comm, nullptr);
      if (r == ncclSuccess) expect(count, [&](size_t) { return sum; });
      break;
    case 3: {
      const int root = static_cast<int>(gen() % static_cast<uint64_t>(nranks));
      r = ncclBroadcast(a.data(), b.data(), count, ncclFloat, root, comm, nullptr);
      if (r == ncclSuccess) expect(count, [&](size_t) { return static_cast<float>(root + 1); });
      break;
    }
    default: {  // a ring of grouped send/recv
      const int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
      r = ncclGroupStart();
      if (r == ncclSuccess) r = ncclSend(a.data(), count, ncclFloat, next, comm, nullptr);
      if (r == ncclSuccess) r = ncclRecv(b.data(), count, ncclFloat, prev, comm, nullptr);
      ncclResult_t end = ncclGroupEnd();
      if (r == ncclSuccess) r = end;
      if (r == ncclSuccess) expect(count, [&](size_t) { return static_cast<float>(prev + 1); });
      break;
    }
  }
  return r;
}

std::string largeCollectivesCheck(ncclComm_t comm, int rank, int nranks, int root) {
  const size_t count = (1u << 20) + 3;
  std::vector<float> in(count), out(count);
  for (size_t i = 0; i < count; ++i) in[i] = static_cast<float>((rank + 1) * (i % 1000));
  if (ncclResult_t r = ncclAllReduce(in.data(), out.data(), count, ncclFloat, ncclSum, comm, nullptr))
    return std::string("allreduce: ") + ncclGetErrorString(r) + ": " + ncclGetLastError(comm);
  const float ranksum = static_cast<float>(nranks * (nranks + 1) / 2);
  for (size_t i = 0; i < count; ++i)
    if (out[i] != ranksum * static_cast<float>(i % 1000)) return "allreduce: wrong element " + std::to_string(i);
  const size_t per = 100003;
  std::vector<float> gathered(per * static_cast<size_t>(nranks));
  if (ncclResult_t r = ncclAllGather(in.data(), gathered.data(), per, ncclFloat, comm, nullptr))
    return std::string("allgather: ") + ncclGetErrorString(r) + ": " + ncclGetLastError(comm);
  for (int r = 0; r < nranks; ++r)
    for (size_t i = 0; i < per; ++i)
      if (gathered[static_cast<size_t>(r) * per + i] != static_cast<float>((r + 1) * (i % 1000)))
        return "allgather: wrong element " + std::to_string(i) + " from rank " + std::to_string(r);
  std::vector<float> b(count, rank == root ? 7.0f : -1.0f);
  if (ncclResult_t r = ncclBroadcast(b.data(), b.data(), count, ncclFloat, root, comm, nullptr))
    return std::string("broadcast: ") + ncclGetErrorString(r) + ": " + ncclGetLastError(comm);
  for (size_t i = 0; i < count; ++i)
    if (b[i] != 7.0f) return "broadcast: wrong element " + std::to_string(i);
  return "";
}

std::string registeredCollectivesCheck(ncclComm_t comm, int rank, int nranks) {
  const int n = nranks;
  const size_t count = (size_t{1} << 20) + 3, per = 100003;
  std::vector<float> in(count), out(count), gathered(per * static_cast<size_t>(n)), part(per);
  std::vector<void*> handles;
  // A failed call ends the check; a wrong element is kept and the calls go on (the other ranks
  // make them too).
  std::string failed, wrong;
  auto ok = [&](const char* what, ncclResult_t r) {
    if (r != ncclSuccess && failed.empty())
      failed = std::string(what) + ": " + ncclGetErrorString(r) + ": " + ncclGetLastError(comm);
    return failed.empty();
  };
  auto check = [&](const char* what, const float* got, size_t elems, auto expect) {
    for (size_t i = 0; i < elems && wrong.empty(); ++i)
      if (got[i] != expect(i)) wrong = std::string(what) + ": wrong element " + std::to_string(i);
  };
  for (std::vector<float>* v : {&in, &out, &gathered, &part}) {
    void* h = nullptr;
    if (!ok("ncclCommRegister", ncclCommRegister(comm, v->data(), v->size() * sizeof(float), &h))) return failed;
    handles.push_back(h);
  }
  const float ranks = static_cast<float>(n * (n + 1) / 2);
  for (int round = 0; round < 5; ++round) {
    auto value = [&](int r, size_t i) { return static_cast<float>((r + 1) * ((i + round) % 1000)); };
    auto pattern = [&](size_t i) { return static_cast<float>((i + round) % 1000); };
    for (size_t i = 0; i < count; ++i) in[i] = value(rank, i);
    if (!ok("allreduce", ncclAllReduce(in.data(), out.data(), count, ncclFloat, ncclSum, comm, nullptr))) break;
    check("allreduce", out.data(), count, [&](size_t i) { return ranks * pattern(i); });
    if (!ok("allreduce in place", ncclAllReduce(out.data(), out.data(), count, ncclFloat, ncclSum, comm, nullptr)))
      break;
    check("allreduce in place", out.data(), count, [&](size_t i) { return n * ranks * pattern(i); });
    if (!ok("allgather", ncclAllGather(in.data(), gathered.data(), per, ncclFloat, comm, nullptr))) break;
    check("allgather", gathered.data(), gathered.size(),
          [&](size_t j) { return value(static_cast<int>(j / per), j % per); });
    float* mine = gathered.data() + static_cast<size_t>(rank) * per;  // in place: this rank's part is the input
    for (size_t i = 0; i < per; ++i) mine[i] = value(rank, i) + 1;
    if (!ok("allgather in place", ncclAllGather(mine, gathered.data(), per, ncclFloat, comm, nullptr))) break;
    check("allgather in place", gathered.data(), gathered.size(),
          [&](size_t j) { return value(static_cast<int>(j / per), j % per) + 1; });
    for (size_t j = 0; j < gathered.size(); ++j) gathered[j] = value(rank, j);
    if (!ok("reducescatter", ncclReduceScatter(gathered.data(), part.data(), per, ncclFloat, ncclSum, comm, nullptr)))
      break;
    check("reducescatter", part.data(), per,
          [&](size_t i) { return ranks * pattern(static_cast<size_t>(rank) * per + i); });
    const int root = round % n;
    for (size_t i = 0; i < count; ++i) out[i] = rank == root ? value(root, i) : -1.0f;
    if (!ok("broadcast", ncclBroadcast(out.data(), out.data(), count, ncclFloat, root, comm, nullptr))) break;
    check("broadcast", out.data(), count, [&](size_t i) { return value(root, i); });
  }
  for (void* h : handles) ok("ncclCommDeregister", ncclCommDeregister(comm, h));
  return !failed.empty() ? failed : wrong;
}

}  // namespace theseus::test
