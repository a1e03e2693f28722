#include "bootstrap/wire.h"

#include <cstring>

#include "common/log.h"

namespace theseus::bootstrap::wire {
namespace {

struct FrameHeader {
  uint32_t marker;
  uint32_t type;
  uint32_t length;
};
static_assert(sizeof(FrameHeader) == 12, "frame header is 12 bytes");

constexpr size_t kUniqueIdBytes = sizeof(ncclUniqueId);

}  // namespace

Writer& Writer::putStr(std::string_view s) {
  put<uint32_t>(static_cast<uint32_t>(s.size()));
  buf_.append(s.data(), s.size());
  return *this;
}

bool Reader::getStr(std::string* s, size_t maxBytes) {
  uint32_t n;
  if (!get(&n) || n > maxBytes || data_.size() - pos_ < n) return false;
  s->assign(data_.data() + pos_, n);
  pos_ += n;
  return true;
}

void putPeer(Writer& w, const PeerInfo& p) {
  w.put<int32_t>(p.rank).put<int32_t>(p.pid).put<int32_t>(p.cudaDev).put<uint8_t>(p.usesCuda ? 1 : 0);
  w.put<uint8_t>(p.deviceSetting);
  w.put<uint64_t>(p.hostHash).put<uint64_t>(p.machineHash).put<uint64_t>(p.gpuHash);
  w.putStr(p.hostname).putStr(p.listenAddress);
}

bool getPeer(Reader& r, PeerInfo* p) {
  int32_t rank, pid, dev;
  uint8_t usesCuda;
  if (!r.get(&rank) || !r.get(&pid) || !r.get(&dev) || !r.get(&usesCuda) || usesCuda > 1 ||
      !r.get(&p->deviceSetting) || !r.get(&p->hostHash) ||
      !r.get(&p->machineHash) || !r.get(&p->gpuHash))
    return false;
  p->usesCuda = usesCuda != 0;
  p->rank = rank;
  p->pid = pid;
  p->cudaDev = dev;
  return r.getStr(&p->hostname, kMaxHostnameBytes) && r.getStr(&p->listenAddress, kMaxAddressBytes);
}

std::string encodeRootJoin(const RootJoin& j) {
  Writer w;
  w.put<int32_t>(j.rank).put<int32_t>(j.nranks).put<int32_t>(j.nRoots).put<int32_t>(j.rootIndex);
  w.put<uint64_t>(j.idsHash).putStr(j.root0Id);
  putPeer(w, j.peer);
  return w.take();
}

Status decodeRootJoin(std::string_view payload, RootJoin* j) {
  Reader r(payload);
  if (!r.get(&j->rank) || !r.get(&j->nranks) || !r.get(&j->nRoots) || !r.get(&j->rootIndex) ||
      !r.get(&j->idsHash) || !r.getStr(&j->root0Id, kUniqueIdBytes) || !getPeer(r, &j->peer) || !r.done())
    return remoteError("malformed join message (%zu bytes)", payload.size());
  if (j->nranks < 1 || j->rank < 0 || j->rank >= j->nranks || j->nRoots < 1 || j->nRoots > j->nranks ||
      j->rootIndex < 0 || j->rootIndex >= j->nRoots || j->root0Id.size() != kUniqueIdBytes || j->peer.rank != j->rank)
    return remoteError("inconsistent join message (rank %d, nranks %d, root %d of %d)", j->rank, j->nranks,
                       j->rootIndex, j->nRoots);
  return Status::ok();
}

std::string encodeTable(const Table& t) {
  Writer w;
  w.put<uint64_t>(t.nonce).put<uint32_t>(static_cast<uint32_t>(t.peers.size()));
  for (const auto& p : t.peers) putPeer(w, p);
  return w.take();
}

Status decodeTable(std::string_view payload, int expectRanks, Table* t) {
  Reader r(payload);
  uint32_t n;
  if (!r.get(&t->nonce) || !r.get(&n) || static_cast<int64_t>(n) != expectRanks)
    return remoteError("malformed peer table (expected %d ranks)", expectRanks);
  t->peers.resize(n);
  for (uint32_t i = 0; i < n; ++i) {
    if (!getPeer(r, &t->peers[i]) || t->peers[i].rank != static_cast<int>(i))
      return remoteError("malformed peer table entry %u", i);
  }
  if (!r.done()) return remoteError("peer table has trailing bytes");
  return Status::ok();
}

std::string encodeLinkJoin(const LinkJoin& j) {
  Writer w;
  w.put<int32_t>(j.rank).put<int32_t>(j.nranks).put<uint64_t>(j.commHash);
  putPeer(w, j.peer);
  return w.take();
}

Status decodeLinkJoin(std::string_view payload, LinkJoin* j) {
  Reader r(payload);
  if (!r.get(&j->rank) || !r.get(&j->nranks) || !r.get(&j->commHash) || !getPeer(r, &j->peer) || !r.done())
    return remoteError("malformed link join message (%zu bytes)", payload.size());
  if (j->nranks < 1 || j->rank < 0 || j->rank >= j->nranks || j->peer.rank != j->rank)
    return remoteError("inconsistent link join message (rank %d of %d)", j->rank, j->nranks);
  return Status::ok();
}

Status sendFrame(int fd, uint32_t type, std::string_view payload, const Wait& wait, const std::string& what) {
  if (payload.size() > UINT32_MAX) return internalError("frame of %zu bytes is too large", payload.size());
  FrameHeader h{kFrameMarker, type, static_cast<uint32_t>(payload.size())};
  // A small frame (most control messages) is built on the stack: also the goodbyes sent from an atexit
  // hook, which runs after the exiting thread's thread_local objects were destroyed.
  char small[256];
  if (payload.size() <= sizeof(small) - sizeof(h)) {
    memcpy(small, &h, sizeof(h));
    if (!payload.empty()) memcpy(small + sizeof(h), payload.data(), payload.size());
    return sendAll(fd, small, sizeof(h) + payload.size(), wait, what);
  }
  thread_local std::string buf;  // reused: the epoch clock sends a lease request from the enqueue path
  buf.assign(reinterpret_cast<const char*>(&h), sizeof(h));
  buf.append(payload.data(), payload.size());
  return sendAll(fd, buf.data(), buf.size(), wait, what);
}

Result<Frame> recvFrame(int fd, size_t maxBytes, const Wait& wait, const std::string& what) {
  FrameHeader h;
  TH_CHECK(recvAll(fd, &h, sizeof(h), wait, what));
  if (h.marker != kFrameMarker)
    return remoteError("%s sent a malformed message (bad frame marker 0x%08x)", what.c_str(), h.marker);
  if (h.length > maxBytes)
    return remoteError("%s sent a message of %u bytes (limit %zu)", what.c_str(), h.length, maxBytes);
  Frame f;
  f.type = h.type;
  f.payload.resize(h.length);
  TH_CHECK(recvAll(fd, f.payload.data(), h.length, wait, what));
  return f;
}

std::string describeUnexpected(const Frame& f, const char* expected) {
  if (f.type == kError || f.type == kTimedOut) {
    // The text comes from another process (or whatever connected): escaped, bounded, never empty.
    std::string why = log::printable(f.payload, 4096);
    if (!why.empty()) return why;
    return f.type == kError ? "the peer reported a failure without saying why"
                            : "the peer reported a timeout without saying why";
  }
  return "unexpected message type " + std::to_string(f.type) + " (expected " + expected + ")";
}

Status failureOf(const Frame& f, const char* expected) {
  std::string why = describeUnexpected(f, expected);
  return f.type == kTimedOut ? timeoutError("%s", why.c_str()) : remoteError("%s", why.c_str());
}

uint32_t failureFrameType(const Status& failure) { return failure.code() == ncclTimeout ? kTimedOut : kError; }

Status sendHello(int fd, const Hello& h, const Wait& wait, const std::string& what) {
  return sendAll(fd, &h, sizeof(h), wait, what);
}

int FrameParser::next(Frame* out) {
  if (buf_.size() - pos_ < sizeof(FrameHeader)) return 0;
  FrameHeader h;
  memcpy(&h, buf_.data() + pos_, sizeof(h));
  if (h.marker != kFrameMarker) {
    error_ = "bad frame marker";
    return -1;
  }
  if (h.length > maxPayload_) {
    error_ = "message of " + std::to_string(h.length) + " bytes exceeds the limit of " + std::to_string(maxPayload_);
    return -1;
  }
  if (buf_.size() - pos_ < sizeof(h) + h.length) return 0;
  out->type = h.type;
  out->payload.assign(buf_.data() + pos_ + sizeof(h), h.length);
  pos_ += sizeof(h) + h.length;
  // Compact once the consumed prefix dominates, so the buffer stays bounded.
  if (pos_ > (1u << 16) && pos_ * 2 > buf_.size()) {
    buf_.erase(0, pos_);
    pos_ = 0;
  } else if (pos_ == buf_.size()) {
    buf_.clear();
    pos_ = 0;
  }
  return 1;
}

uint64_t hashBytes(const void* data, size_t bytes, uint64_t seed) {
  uint64_t h = 0xcbf29ce484222325ull ^ seed;
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < bytes; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  h ^= h >> 31;
  return h;
}

}  // namespace theseus::bootstrap::wire
