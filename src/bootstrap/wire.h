// The bootstrap's wire format: the hello that opens every TCP connection, the
// frames exchanged on rendezvous connections and control links, and the
// bounds-checked codecs of their payloads.
//
// Connection = Hello (40 bytes), then frames. Frame = {marker, type, length}
// (12 bytes, little-endian) + `length` payload bytes. Every reader checks the
// marker and bounds the length before allocating, so garbage, a foreign
// protocol or an absurd length is a clean error on that connection only.
// Types below 16 are the bootstrap's own; 16 and up carry MsgType messages.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "bootstrap/bootstrap.h"
#include "bootstrap/socket.h"
#include "common/status.h"

namespace theseus::bootstrap::wire {

constexpr uint64_t kProtocolMagic = 0x31544f4f42534854ull;  // "THSBOOT1" little-endian
constexpr uint32_t kProtocolVersion = 1;
constexpr uint32_t kFrameMarker = 0x31524654u;                // "TFR1"
constexpr size_t kMaxRendezvousBytes = 1u << 20;              // join/table frames (per connection)
constexpr size_t kMaxHostnameBytes = 255;
constexpr size_t kMaxAddressBytes = 128;

// Who is connecting and why.
enum class ConnKind : uint32_t {
  kRootJoin = 1,     // rank -> root listener (magic = the unique id's magic)
  kRootForward = 2,  // root i -> root 0 (ncclCommInitRankScalable)
  kControl = 3,      // rank -> leader of a comm made from unique ids
  kData = 4,         // rank -> rank data connection (connectTo/acceptFrom)
  kChildJoin = 5,    // child member -> child leader, through the parent's listener
};

struct Hello {
  uint64_t magic = kProtocolMagic;
  uint32_t version = kProtocolVersion;
  uint32_t kind = 0;
  uint64_t commHash = 0;
  int32_t fromRank = -1;
  uint32_t reserved = 0;
  uint64_t tag = 0;
};
static_assert(sizeof(Hello) == 40, "the hello is 40 bytes on the wire");

enum FrameType : uint32_t {
  kBye = 1,              // clean leave
  kJoin = 2,             // rendezvous: who I am
  kTable = 3,            // rendezvous: everybody
  kError = 4,            // rendezvous failed: why (text)
  kAgContribution = 5,   // rank -> leader: {seq, flags, bytes}
  kAgResult = 6,         // leader -> rank: {seq, n x bytes}
  kAgFailed = 7,         // leader -> rank: {seq, why}
  kPeerFailed = 8,       // leader -> rank: {rank, why}
  kTimedOut = 9,         // rendezvous failed because a rank did not come in time: why (text)
  kFirstUserType = 16,   // MsgType values
};

struct Frame {
  uint32_t type = 0;
  std::string payload;
};

// Append-only encoder (little-endian, strings length-prefixed).
class Writer {
 public:
  template <typename T>
  Writer& put(T v) {
    buf_.append(reinterpret_cast<const char*>(&v), sizeof(v));
    return *this;
  }
  Writer& putStr(std::string_view s);
  const std::string& data() const { return buf_; }
  std::string take() { return std::move(buf_); }

 private:
  std::string buf_;
};

// Bounds-checked decoder: every get fails (returns false) instead of reading past the end.
class Reader {
 public:
  explicit Reader(std::string_view data) : data_(data) {}
  template <typename T>
  bool get(T* v) {
    if (data_.size() - pos_ < sizeof(T)) return false;
    memcpy(v, data_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  bool getStr(std::string* s, size_t maxBytes);
  bool done() const { return pos_ == data_.size(); }

 private:
  std::string_view data_;
  size_t pos_ = 0;
};

void putPeer(Writer& w, const PeerInfo& p);
bool getPeer(Reader& r, PeerInfo* p);

// A rank introducing itself to a root (kRootJoin, then this in a kJoin frame).
struct RootJoin {
  int32_t rank = -1;
  int32_t nranks = 0;
  int32_t nRoots = 1;
  int32_t rootIndex = 0;
  uint64_t idsHash = 0;       // hash of all unique ids: ranks of one comm agree
  std::string root0Id;        // ids[0] (128 bytes): where root i forwards its ranks
  PeerInfo peer;
};
std::string encodeRootJoin(const RootJoin& j);
Status decodeRootJoin(std::string_view payload, RootJoin* j);

// The rendezvous result: every rank's PeerInfo (rank order) and a per-comm nonce.
struct Table {
  uint64_t nonce = 0;
  std::vector<PeerInfo> peers;
};
std::string encodeTable(const Table& t);
Status decodeTable(std::string_view payload, int expectRanks, Table* t);

// A member introducing itself to the leader on a control link (kControl or kChildJoin).
struct LinkJoin {
  int32_t rank = -1;
  int32_t nranks = 0;
  uint64_t commHash = 0;
  PeerInfo peer;
};
std::string encodeLinkJoin(const LinkJoin& j);
Status decodeLinkJoin(std::string_view payload, LinkJoin* j);

// Frames on blocking-style connections.
Status sendFrame(int fd, uint32_t type, std::string_view payload, const Wait& wait, const std::string& what);
Result<Frame> recvFrame(int fd, size_t maxBytes, const Wait& wait, const std::string& what);
// A kError/kTimedOut frame's text (control and non-ASCII bytes escaped, at most 4 KiB, never
// empty), or a description of an unexpected frame.
std::string describeUnexpected(const Frame& f, const char* expected);
// The failure a rendezvous reply that is not `expected` stands for: a timeout for
// kTimedOut (the caller sees ncclTimeout), a remote error otherwise.
Status failureOf(const Frame& f, const char* expected);
// The frame type that carries `failure` to the other ranks of a rendezvous.
uint32_t failureFrameType(const Status& failure);

Status sendHello(int fd, const Hello& h, const Wait& wait, const std::string& what);

// Incremental frame parser for non-blocking readers (the control thread).
class FrameParser {
 public:
  explicit FrameParser(size_t maxPayload) : maxPayload_(maxPayload) {}
  void append(const char* p, size_t n) { buf_.append(p, n); }
  // 1: *out holds the next frame; 0: need more bytes; -1: malformed (see error()).
  int next(Frame* out);
  const std::string& error() const { return error_; }
  size_t buffered() const { return buf_.size() - pos_; }

 private:
  size_t maxPayload_;
  std::string buf_;
  size_t pos_ = 0;
  std::string error_;
};

// 64-bit hash (FNV-1a then a splitmix finaliser), chainable through `seed`.
uint64_t hashBytes(const void* data, size_t bytes, uint64_t seed = 0);
template <typename T>
uint64_t hashValue(const T& v, uint64_t seed) {
  return hashBytes(&v, sizeof(v), seed);
}

}  // namespace theseus::bootstrap::wire
