#include "epoch/epoch_messages.h"

#include <cstring>

namespace theseus::epoch {
namespace {

constexpr uint8_t kMagic0 = 'E', kMagic1 = 'P';

class Writer {
 public:
  void u8(uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void u64(uint64_t v) {
    for (int i = 0; i < 8; ++i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  void str(const std::string& s) {
    uint32_t n = static_cast<uint32_t>(s.size());
    for (int i = 0; i < 4; ++i) out_.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
    out_ += s;
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(std::string_view b) : b_(b) {}
  bool u8(uint8_t* v) {
    if (pos_ + 1 > b_.size()) return false;
    *v = static_cast<uint8_t>(b_[pos_++]);
    return true;
  }
  bool u64(uint64_t* v) {
    if (pos_ + 8 > b_.size()) return false;
    uint64_t x = 0;
    for (int i = 0; i < 8; ++i) x |= uint64_t(static_cast<uint8_t>(b_[pos_ + i])) << (8 * i);
    pos_ += 8;
    *v = x;
    return true;
  }
  bool str(std::string* s, size_t max) {
    if (pos_ + 4 > b_.size()) return false;
    uint32_t n = 0;
    for (int i = 0; i < 4; ++i) n |= uint32_t(static_cast<uint8_t>(b_[pos_ + i])) << (8 * i);
    pos_ += 4;
    if (n > max || pos_ + n > b_.size()) return false;
    s->assign(b_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  bool done() const { return pos_ == b_.size(); }

 private:
  std::string_view b_;
  size_t pos_ = 0;
};

}  // namespace

const char* msgKindName(MsgKind k) {
  switch (k) {
    case MsgKind::kGrant: return "GRANT";
    case MsgKind::kPrepare: return "PREPARE";
    case MsgKind::kCommit: return "COMMIT";
    case MsgKind::kCancel: return "CANCEL";
    case MsgKind::kProgress: return "PROGRESS";
    case MsgKind::kAck: return "ACK";
  }
  return "?";
}

std::string EpochMsg::encode() const {
  Writer w;
  w.u8(kMagic0);
  w.u8(kMagic1);
  w.u8(kFormat);
  w.u8(static_cast<uint8_t>(kind));
  switch (kind) {
    case MsgKind::kGrant:
      w.u64(horizon);
      w.u64(reportAt);
      break;
    case MsgKind::kPrepare:
      w.u64(version);
      w.u64(horizon);
      w.str(text);
      w.str(reason);
      break;
    case MsgKind::kCommit:
      w.u64(version);
      w.u64(effectiveSeq);
      w.u64(horizon);
      w.u64(reportAt);
      break;
    case MsgKind::kCancel:
      w.u64(version);
      w.str(text);
      break;
    case MsgKind::kProgress:
      w.u64(seq);
      break;
    case MsgKind::kAck:
      w.u64(version);
      w.u8(ok ? 1 : 0);
      w.str(text);
      break;
  }
  return w.take();
}

Result<EpochMsg> EpochMsg::decode(std::string_view bytes) {
  Reader r(bytes);
  uint8_t m0 = 0, m1 = 0, format = 0, kind = 0;
  if (!r.u8(&m0) || !r.u8(&m1) || m0 != kMagic0 || m1 != kMagic1)
    return invalidArgument("epoch message of %zu bytes does not start with the epoch magic", bytes.size());
  if (!r.u8(&format) || format != kFormat)
    return invalidArgument("epoch message has format version %u; this library speaks version %u",
                           static_cast<unsigned>(format), static_cast<unsigned>(kFormat));
  if (!r.u8(&kind) || kind < static_cast<uint8_t>(MsgKind::kGrant) || kind > static_cast<uint8_t>(MsgKind::kAck))
    return invalidArgument("epoch message has unknown type %u", static_cast<unsigned>(kind));
  EpochMsg m;
  m.kind = static_cast<MsgKind>(kind);
  bool ok = true;
  uint8_t flag = 0;
  switch (m.kind) {
    case MsgKind::kGrant: ok = r.u64(&m.horizon) && r.u64(&m.reportAt); break;
    case MsgKind::kPrepare:
      ok = r.u64(&m.version) && r.u64(&m.horizon) && r.str(&m.text, kMaxTextBytes) && r.str(&m.reason, 4096);
      break;
    case MsgKind::kCommit:
      ok = r.u64(&m.version) && r.u64(&m.effectiveSeq) && r.u64(&m.horizon) && r.u64(&m.reportAt);
      break;
    case MsgKind::kCancel: ok = r.u64(&m.version) && r.str(&m.text, 4096); break;
    case MsgKind::kProgress: ok = r.u64(&m.seq); break;
    case MsgKind::kAck:
      ok = r.u64(&m.version) && r.u8(&flag) && flag <= 1 && r.str(&m.text, 1 << 16);
      m.ok = flag == 1;
      break;
  }
  if (!ok) return invalidArgument("epoch %s message of %zu bytes is truncated or malformed", msgKindName(m.kind),
                                  bytes.size());
  if (!r.done()) return invalidArgument("epoch %s message has trailing bytes", msgKindName(m.kind));
  // Semantic checks that need no state.
  if (m.kind == MsgKind::kGrant && m.reportAt > m.horizon)
    return invalidArgument("epoch GRANT reports at %llu, beyond its horizon %llu",
                           static_cast<unsigned long long>(m.reportAt), static_cast<unsigned long long>(m.horizon));
  if (m.kind == MsgKind::kCommit && (m.horizon < m.effectiveSeq || m.reportAt > m.horizon))
    return invalidArgument("epoch COMMIT v%llu: effective seq %llu, horizon %llu, report point %llu are inconsistent",
                           static_cast<unsigned long long>(m.version), static_cast<unsigned long long>(m.effectiveSeq),
                           static_cast<unsigned long long>(m.horizon), static_cast<unsigned long long>(m.reportAt));
  if ((m.kind == MsgKind::kPrepare || m.kind == MsgKind::kCommit || m.kind == MsgKind::kCancel ||
       m.kind == MsgKind::kAck) && m.version == 0)
    return invalidArgument("epoch %s message names table version 0", msgKindName(m.kind));
  return m;
}

std::string EpochMsg::describe() const {
  auto u = [](uint64_t v) { return std::to_string(v); };
  switch (kind) {
    case MsgKind::kGrant: return "GRANT lease " + u(horizon) + " (report at " + u(reportAt) + ")";
    case MsgKind::kPrepare: return "PREPARE v" + u(version) + " at seq " + u(horizon) + " (" + reason + ")";
    case MsgKind::kCommit: return "COMMIT v" + u(version) + " at seq " + u(effectiveSeq) + " (lease " + u(horizon) + ")";
    case MsgKind::kCancel: return "CANCEL v" + u(version) + " (" + text + ")";
    case MsgKind::kProgress: return "PROGRESS seq " + u(seq);
    case MsgKind::kAck: return "ACK v" + u(version) + (ok ? " ok" : " failed: " + text);
  }
  return "?";
}

}  // namespace theseus::epoch
