#include "transport/emulation.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "common/knobs.h"
#include "common/log.h"

namespace theseus::transport {
namespace {

const StringKnob kEmulate("THESEUS_EMULATE", nullptr,
                          "Emulate degraded links and stragglers, e.g. 'throttle:0->1:10%@seq=100-400;"
                          "latency:2->3:50us;straggle:3:2ms@t=5s-20s' (docs/epochs.md); off when unset");

std::string trim(const std::string& s) {
  std::string out;
  for (char c : s)
    if (c != ' ' && c != '\t') out += c;
  return out;
}

bool endsWith(const std::string& s, const char* suffix, std::string* head) {
  std::string suf(suffix);
  if (s.size() <= suf.size() || s.compare(s.size() - suf.size(), suf.size(), suf) != 0) return false;
  *head = s.substr(0, s.size() - suf.size());
  return true;
}

bool parseNumber(const std::string& s, double* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  double v = strtod(s.c_str(), &end);
  if (*end != '\0' || errno != 0 || !std::isfinite(v) || v < 0) return false;
  *out = v;
  return true;
}

bool parseUnsigned(const std::string& s, uint64_t* out) {
  if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos || s.size() > 18) return false;
  *out = strtoull(s.c_str(), nullptr, 10);
  return true;
}

Status parseRank(const std::string& s, int* out) {
  if (s == "*") {
    *out = -1;
    return Status::ok();
  }
  uint64_t v;
  if (!parseUnsigned(s, &v) || v > (1u << 24)) return invalidArgument("'%s' is not a rank (a number or *)", s.c_str());
  *out = static_cast<int>(v);
  return Status::ok();
}

Status parseTime(const std::string& s, uint64_t* ns) {
  std::string head;
  double scale = 0, v = 0;
  if (endsWith(s, "us", &head)) scale = 1e3;
  else if (endsWith(s, "ms", &head)) scale = 1e6;
  else if (endsWith(s, "s", &head)) scale = 1e9;
  if (scale == 0 || !parseNumber(head, &v))
    return invalidArgument("'%s' is not a time (e.g. 50us, 2ms, 5s)", s.c_str());
  // Nanoseconds must fit in 64 bits (converting a larger double is undefined): up to 584 years.
  const double ns64 = v * scale;
  if (!(ns64 < 18446744073709551616.0)) return invalidArgument("'%s' is too long (at most 584 years)", s.c_str());
  *ns = static_cast<uint64_t>(ns64);
  return Status::ok();
}

Status parseRate(const std::string& s, EmulationRule* r) {
  std::string head;
  double v = 0;
  if (endsWith(s, "%", &head)) {
    if (!parseNumber(head, &v) || v < 0.001 || v > 100)
      return invalidArgument("'%s' is not a percentage in [0.001, 100]", s.c_str());
    r->fraction = v / 100.0;
    return Status::ok();
  }
  double scale = 0;
  if (endsWith(s, "GB/s", &head)) scale = 1.0;
  else if (endsWith(s, "MB/s", &head)) scale = 1e-3;
  else if (endsWith(s, "Gbps", &head)) scale = 1.0 / 8;
  if (scale == 0 || !parseNumber(head, &v) || v <= 0)
    return invalidArgument("'%s' is not a rate (e.g. 10%%, 2GB/s, 500MB/s, 25Gbps)", s.c_str());
  // Slower than 1 KB/s a message would hold the wire for days: a typo, not an emulation.
  if (v * scale < 1e-6) return invalidArgument("'%s' is below the slowest rate, 1 KB/s", s.c_str());
  r->bytesPerNs = v * scale;
  return Status::ok();
}

Status parseLink(const std::string& s, EmulationRule* r) {
  size_t both = s.find("<->");
  size_t one = s.find("->");
  std::string a, b;
  if (both != std::string::npos) {
    a = s.substr(0, both);
    b = s.substr(both + 3);
    r->bothWays = true;
  } else if (one != std::string::npos) {
    a = s.substr(0, one);
    b = s.substr(one + 2);
  } else {
    return invalidArgument("'%s' is not a link (a->b or a<->b)", s.c_str());
  }
  TH_CHECK(parseRank(a, &r->from));
  TH_CHECK(parseRank(b, &r->to));
  if (r->from >= 0 && r->from == r->to) return invalidArgument("link '%s' connects a rank to itself", s.c_str());
  return Status::ok();
}

Status parseWindow(const std::string& s, EmulationWindow* w) {
  size_t eq = s.find('=');
  size_t dash = s.find('-', eq == std::string::npos ? 0 : eq);
  if (eq == std::string::npos || dash == std::string::npos)
    return invalidArgument("window '%s' is not seq=<a>-[<b>] or t=<a>-[<b>]", s.c_str());
  std::string axis = s.substr(0, eq), lo = s.substr(eq + 1, dash - eq - 1), hi = s.substr(dash + 1);
  if (axis == "seq") {
    w->axis = EmulationWindow::Axis::kSeq;
    if (!parseUnsigned(lo, &w->begin) || (!hi.empty() && !parseUnsigned(hi, &w->end)))
      return invalidArgument("window '%s': collective numbers must be non-negative integers", s.c_str());
  } else if (axis == "t") {
    w->axis = EmulationWindow::Axis::kTime;
    TH_CHECK(parseTime(lo, &w->begin).withContext("window '" + s + "'"));
    if (!hi.empty()) TH_CHECK(parseTime(hi, &w->end).withContext("window '" + s + "'"));
  } else {
    return invalidArgument("window '%s' must start with seq= or t=", s.c_str());
  }
  if (w->end <= w->begin) return invalidArgument("window '%s' is empty (its end is not after its start)", s.c_str());
  return Status::ok();
}

Status parseRule(const std::string& text, EmulationRule* r) {
  r->text = text;
  std::string body = text;
  size_t at = text.find('@');
  if (at != std::string::npos) {
    body = text.substr(0, at);
    TH_CHECK(parseWindow(text.substr(at + 1), &r->window));
  }
  size_t c1 = body.find(':');
  size_t c2 = c1 == std::string::npos ? std::string::npos : body.find(':', c1 + 1);
  if (c2 == std::string::npos || body.find(':', c2 + 1) != std::string::npos)
    return invalidArgument("expected <kind>:<target>:<value>");
  std::string kind = body.substr(0, c1), target = body.substr(c1 + 1, c2 - c1 - 1), value = body.substr(c2 + 1);
  if (kind == "throttle") {
    r->kind = EmulationRule::Kind::kThrottle;
    TH_CHECK(parseLink(target, r));
    return parseRate(value, r);
  }
  if (kind == "latency") {
    r->kind = EmulationRule::Kind::kLatency;
    TH_CHECK(parseLink(target, r));
    return parseTime(value, &r->ns);
  }
  if (kind == "straggle") {
    r->kind = EmulationRule::Kind::kStraggle;
    TH_CHECK(parseRank(target, &r->from));
    return parseTime(value, &r->ns);
  }
  return invalidArgument("unknown kind '%s' (throttle, latency, straggle)", kind.c_str());
}

}  // namespace

bool EmulationRule::matchesLink(int sender, int receiver) const {
  if (kind == Kind::kStraggle) return false;
  auto one = [&](int a, int b) { return (from < 0 || from == a) && (to < 0 || to == b); };
  return one(sender, receiver) || (bothWays && one(receiver, sender));
}

Result<std::vector<EmulationRule>> parseEmulation(const std::string& spec) {
  std::vector<EmulationRule> rules;
  std::string text = trim(spec);
  size_t pos = 0;
  int index = 0;
  while (pos <= text.size()) {
    size_t semi = text.find(';', pos);
    std::string item = text.substr(pos, semi == std::string::npos ? std::string::npos : semi - pos);
    pos = semi == std::string::npos ? text.size() + 1 : semi + 1;
    if (item.empty()) continue;
    ++index;
    EmulationRule r;
    Status st = parseRule(item, &r);
    if (!st.isOk())
      return invalidArgument("THESEUS_EMULATE rule %d '%s': %s", index, item.c_str(), st.message().c_str());
    rules.push_back(std::move(r));
  }
  return rules;
}

Result<std::unique_ptr<LinkEmulation>> LinkEmulation::fromEnv(int rank, int nranks) {
  if (!kEmulate.isSet()) return std::unique_ptr<LinkEmulation>();
  std::vector<EmulationRule> rules;
  TH_ASSIGN(rules, parseEmulation(kEmulate.get()));
  if (rules.empty()) return std::unique_ptr<LinkEmulation>();
  for (const auto& r : rules) {
    TH_INFO(log::kNet | log::kInit, "THESEUS_EMULATE (rank %d of %d): %s", rank, nranks, r.text.c_str());
    // A rule for a rank this communicator does not have can never apply: say so (once per rule).
    const int highest = std::max(r.from, r.to);
    if (highest >= nranks && rank == 0)
      TH_WARN("THESEUS_EMULATE: rule '%s' names rank %d, but the communicator has %d rank(s); it never applies",
              r.text.c_str(), highest, nranks);
  }
  return std::make_unique<LinkEmulation>(std::move(rules), rank, nranks);
}

LinkEmulation::LinkEmulation(std::vector<EmulationRule> rules, int rank, int nranks)
    : rules_(std::move(rules)), rank_(rank), nranks_(nranks), createdNs_(nowNs()) {}

bool LinkEmulation::activeNow(const EmulationRule& r) const {
  switch (r.window.axis) {
    case EmulationWindow::Axis::kAlways: return true;
    case EmulationWindow::Axis::kSeq: {
      uint64_t s = seq_.load(std::memory_order_relaxed);
      return s >= r.window.begin && s < r.window.end;
    }
    case EmulationWindow::Axis::kTime: {
      uint64_t t = nowNs() - createdNs_;
      return t >= r.window.begin && t < r.window.end;
    }
  }
  return false;
}

uint64_t LinkEmulation::straggleNs() const {
  uint64_t ns = 0;
  for (const auto& r : rules_)
    if (r.kind == EmulationRule::Kind::kStraggle && (r.from < 0 || r.from == rank_) && activeNow(r))
      ns = r.ns > UINT64_MAX - ns ? UINT64_MAX : ns + r.ns;  // several long rules saturate
  return ns;
}

void LinkEmulation::noteRelease(uint64_t atNs) {
  uint64_t cur = earliestRelease_.load(std::memory_order_relaxed);
  while (atNs < cur && !earliestRelease_.compare_exchange_weak(cur, atNs, std::memory_order_relaxed)) {
  }
}

int64_t LinkEmulation::clampWaitUs(int64_t timeoutUs) {
  // Every held-back message re-registers each time the executor polls it, so the
  // earliest release can be forgotten once a wait has been shortened for it.
  uint64_t at = earliestRelease_.exchange(UINT64_MAX, std::memory_order_relaxed);
  if (at == UINT64_MAX) return timeoutUs;
  uint64_t now = nowNs();
  if (at <= now) return 0;
  return std::min<int64_t>(timeoutUs, static_cast<int64_t>((at - now) / 1000) + 1);
}

}  // namespace theseus::transport
