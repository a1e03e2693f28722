// Buffer layout helpers and the per-step structure checks (analysis.h).
//
// The structure checks are everything that can be said about one step without
// executing the program: its op and peers are valid, its ranges lie inside
// buffers that exist on this rank, operands have the same geometry, the input
// is not written out of place, deps point backwards. The analysis runs them
// first so it never indexes out of bounds; the verifier reports them verbatim.
#include <algorithm>
#include <cstdarg>
#include <cstdio>

#include "schedule/analysis.h"
#include "schedule/describe.h"

namespace theseus::schedule {

PhysRange physicalRange(const Program& p, int rank, const ChunkRange& r) {
  if (p.inPlace) {
    InPlaceAlias a = inPlaceAlias(p.collective, rank);
    if (r.buf == a.contained) return {a.container, a.block * p.chunksPerBlock + r.first, r.count};
  }
  return {r.buf, r.first, r.count};
}

bool bufferPresent(Collective c, int rank, int root, Buf b) {
  switch (b) {
    case Buf::kScratch: return true;
    case Buf::kInput: return !((c == Collective::kBroadcast || c == Collective::kScatter) && rank != root);
    case Buf::kOutput: return !((c == Collective::kReduce || c == Collective::kGather) && rank != root);
  }
  return false;
}

bool inputWritable(const Program& p, int rank) {
  return p.inPlace && bufferPresent(p.collective, rank, p.root, Buf::kOutput) &&
         bufferPresent(p.collective, rank, p.root, Buf::kInput);
}

const ChunkRange& messageRange(const Step& s) {
  switch (s.op) {
    case Op::kSend:
    case Op::kRecvReduceSend: return s.src;
    default: return s.dst;
  }
}

namespace {

Status stepError(const Program& p, int rank, uint32_t index, const char* fmt, ...)
    __attribute__((format(printf, 4, 5)));
Status stepError(const Program& p, int rank, uint32_t index, const char* fmt, ...) {
  char text[512];
  va_list args;
  va_start(args, fmt);
  vsnprintf(text, sizeof(text), fmt, args);
  va_end(args);
  return invalidArgument("%s: %s", stepLabel(p, rank, index).c_str(), text);
}

bool validCollective(Collective c) {
  switch (c) {
    case Collective::kBroadcast:
    case Collective::kReduce:
    case Collective::kAllGather:
    case Collective::kReduceScatter:
    case Collective::kAllReduce:
    case Collective::kAlltoAll:
    case Collective::kScatter:
    case Collective::kGather: return true;
  }
  return false;
}

Status checkPeer(const Program& p, int rank, uint32_t i, const char* role, int32_t peer, bool used) {
  if (!used) {
    if (peer != -1) return stepError(p, rank, i, "%s peer is %d but the op does not use it (must be -1)", role, peer);
    return Status::ok();
  }
  if (peer < 0 || peer >= p.nranks)
    return stepError(p, rank, i, "%s peer %d is out of range for %d ranks", role, peer, p.nranks);
  if (peer == rank) return stepError(p, rank, i, "%s peer is the rank itself (use copy/reduce for local data)", role);
  return Status::ok();
}

Status checkRange(const Program& p, int rank, uint32_t i, const char* role, const ChunkRange& r, bool writes) {
  if (static_cast<uint8_t>(r.buf) > static_cast<uint8_t>(Buf::kScratch))
    return stepError(p, rank, i, "%s names unknown buffer %d", role, static_cast<int>(r.buf));
  if (r.count == 0) return stepError(p, rank, i, "%s is an empty chunk range (%s)", role, rangeText(r).c_str());
  uint32_t chunks = p.chunksIn(r.buf);
  if (static_cast<uint64_t>(r.first) + r.count > chunks) {
    if (r.buf == Buf::kScratch && p.scratchBlocks == 0)
      return stepError(p, rank, i, "%s uses %s but the program declares no scratch blocks", role,
                       rangeText(r).c_str());
    return stepError(p, rank, i, "%s %s is out of range: the %s buffer has %u chunks (%u blocks of %u)", role,
                     rangeText(r).c_str(), bufName(r.buf), chunks, p.chunksPerBlock ? chunks / p.chunksPerBlock : 0,
                     p.chunksPerBlock);
  }
  if (!bufferPresent(p.collective, rank, p.root, r.buf))
    return stepError(p, rank, i, "%s uses the %s buffer, which %s does not have on non-root rank %d (root is %d)", role,
                     bufName(r.buf), collectiveName(p.collective), rank, p.root);
  if (writes && r.buf == Buf::kInput && !inputWritable(p, rank))
    return stepError(p, rank, i, "%s writes the input buffer, which is read-only here (%s)", role,
                     p.inPlace ? "no output on this rank" : "out-of-place");
  return Status::ok();
}

Status checkStep(const Program& p, int rank, uint32_t i) {
  const Step& s = p.ranks[rank].steps[i];
  if (static_cast<uint8_t>(s.op) > static_cast<uint8_t>(Op::kRecvReduceCopySend))
    return stepError(p, rank, i, "unknown op %d", static_cast<int>(s.op));
  if (s.channel >= p.nchannels)
    return stepError(p, rank, i, "channel %u is out of range: the program has %u channels", s.channel, p.nchannels);
  TH_CHECK(checkPeer(p, rank, i, "receive", s.recvPeer, opReceives(s.op)));
  TH_CHECK(checkPeer(p, rank, i, "send", s.sendPeer, opSends(s.op)));
  if (opReadsSrc(s.op)) TH_CHECK(checkRange(p, rank, i, "src", s.src, false));
  if (opWritesDst(s.op)) TH_CHECK(checkRange(p, rank, i, "dst", s.dst, true));
  if (opReduces(s.op) && !isReducing(p.collective))
    return stepError(p, rank, i, "reduces data, but %s is not a reducing collective", collectiveName(p.collective));
  if (opHasTwoOperands(s.op)) {
    uint32_t k = p.chunksPerBlock;
    if (s.src.count != s.dst.count || s.src.first % k != s.dst.first % k)
      return stepError(p, rank, i,
                       "size mismatch: src %s and dst %s differ in length or start sub-chunk "
                       "(%u vs %u chunks, sub-chunk %u vs %u of %u)",
                       rangeText(s.src).c_str(), rangeText(s.dst).c_str(), s.src.count, s.dst.count, s.src.first % k,
                       s.dst.first % k, k);
    PhysRange a = physicalRange(p, rank, s.src), b = physicalRange(p, rank, s.dst);
    if (overlaps(a, b) && a.first != b.first)
      return stepError(p, rank, i, "src %s and dst %s overlap partially (they must be identical or disjoint)",
                       rangeText(s.src).c_str(), rangeText(s.dst).c_str());
  }
  for (uint32_t d : s.deps)
    if (d >= i) return stepError(p, rank, i, "dep %u is not an earlier step of rank %d", d, rank);
  return Status::ok();
}

}  // namespace

Status checkStructure(const Program& p, int rank) {
  if (!validCollective(p.collective))
    return invalidArgument("%s: unknown collective %d", programLabel(p).c_str(), static_cast<int>(p.collective));
  if (p.nranks < 1) return invalidArgument("%s: nranks must be >= 1", programLabel(p).c_str());
  if (p.ranks.size() != static_cast<size_t>(p.nranks))
    return invalidArgument("%s: has programs for %zu ranks, expected %d", programLabel(p).c_str(), p.ranks.size(),
                           p.nranks);
  if (p.chunksPerBlock < 1) return invalidArgument("%s: chunksPerBlock must be >= 1", programLabel(p).c_str());
  if (p.nchannels < 1 || p.nchannels > 256)
    return invalidArgument("%s: nchannels %u out of range 1..256", programLabel(p).c_str(), p.nchannels);
  if (isRooted(p.collective) && (p.root < 0 || p.root >= p.nranks))
    return invalidArgument("%s: root %d out of range", programLabel(p).c_str(), p.root);
  uint64_t blocks = std::max<uint64_t>({inputBlocks(p.collective, p.nranks), outputBlocks(p.collective, p.nranks),
                                        p.scratchBlocks});
  if (blocks * p.chunksPerBlock > (1ull << 31))
    return invalidArgument("%s: %llu blocks of %u chunks exceed the chunk index range", programLabel(p).c_str(),
                           static_cast<unsigned long long>(blocks), p.chunksPerBlock);
  int lo = rank < 0 ? 0 : rank, hi = rank < 0 ? p.nranks : rank + 1;
  if (rank >= p.nranks) return invalidArgument("%s: no rank %d", programLabel(p).c_str(), rank);
  for (int r = lo; r < hi; ++r) {
    uint32_t nsteps = static_cast<uint32_t>(p.ranks[r].steps.size());
    for (uint32_t i = 0; i < nsteps; ++i) {
      Status st = checkStep(p, r, i);
      if (!st.isOk()) return st.withContext(programLabel(p));
    }
  }
  return Status::ok();
}

}  // namespace theseus::schedule
