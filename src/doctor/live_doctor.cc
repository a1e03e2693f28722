#include "doctor/live_doctor.h"

#include <algorithm>
#include <set>

#include "common/knobs.h"
#include "common/log.h"
#include "doctor/measurements.h"

namespace theseus::doctor {
namespace {

const IntKnob kInterval("THESEUS_DOCTOR_INTERVAL_MS", 1000,
                        "How often the leader runs the doctor on its cluster view and publishes the verdict as "
                        "doctor.* attributes (docs/observability.md); 0: never");

// The culprit is the most serious published verdict: a slow host (every rank on it is slowed),
// then a rank's own communication, a rank's compute, then one link; the larger factor among equals.
int priorityOf(const std::string& kind) {
  if (kind == "slow_host") return 4;
  if (kind == "comm_straggler") return 3;
  if (kind == "compute_straggler") return 2;
  return 1;
}

}  // namespace

int64_t LiveDoctor::configuredIntervalMs() { return std::max<int64_t>(kInterval.get(), 0); }

std::vector<std::string> verdictNames(const Finding& f) {
  std::vector<std::string> names;
  if (f.kind == "slow_link")
    for (const Link& l : f.links) names.push_back(format("doctor.slow_link.%d.%d", l.from, l.to));
  if (f.kind == "slow_host" && !f.hosts.empty()) names.push_back(format("doctor.slow_host.%d", f.hosts[0]));
  if ((f.kind == "comm_straggler" || f.kind == "compute_straggler") && !f.ranks.empty())
    names.push_back(format("doctor.%s.%d", f.kind.c_str(), f.ranks[0]));
  return names;
}

bool LiveDoctor::evaluate(const attrs::ClusterView& view, uint64_t nowNs) {
  const Measurements m = fromView(view, placement_, nowNs, kMaxAgeNs);
  for (const Finding& f : analyzePerformance(m, t_))
    for (const std::string& name : verdictNames(f)) note(name, f, nowNs);
  for (auto it = candidates_.begin(); it != candidates_.end();) {
    Candidate& c = it->second;
    if (c.lastSeenNs != nowNs) c.streak = 0;  // not found this time
    const bool expired = nowNs - c.lastSeenNs > (c.published ? kHoldNs : 0);
    it = expired ? candidates_.erase(it) : std::next(it);
  }
  const std::map<std::string, double> before = published_;
  choose();
  return published_ != before;
}

void LiveDoctor::note(const std::string& name, const Finding& f, uint64_t nowNs) {
  Candidate& c = candidates_[name];
  c.streak = c.lastSeenNs != 0 && c.streak > 0 ? c.streak + 1 : 1;
  c.value = f.factor;
  c.lastSeenNs = nowNs;
  c.rank = f.ranks.empty() ? -1 : f.ranks[0];
  c.host = !f.hosts.empty() ? f.hosts[0] : (c.rank >= 0 ? placement_.hostIndex(c.rank) : -1);
  c.priority = priorityOf(f.kind);
  c.words = f.words;
  c.published = c.published || c.streak >= kConfirm;
}

void LiveDoctor::choose() {
  published_.clear();
  const Candidate* culprit = nullptr;
  for (const auto& [name, c] : candidates_) {
    if (!c.published) continue;
    published_[name] = c.value;
    if (culprit == nullptr || c.priority > culprit->priority ||
        (c.priority == culprit->priority && c.value > culprit->value))
      culprit = &c;
  }
  if (culprit != nullptr && culprit->rank >= 0) {
    published_["doctor.culprit.rank"] = culprit->rank;
    published_["doctor.culprit.host"] = culprit->host;
  }
}

std::string LiveDoctor::describe() const {
  std::set<std::string> words;  // the links of one slow path share theirs
  for (const auto& [name, c] : candidates_)
    if (c.published) words.insert(c.words);
  std::string out;
  for (const std::string& w : words) out += (out.empty() ? "" : "; ") + w;
  return out.empty() ? "nothing wrong" : out;
}

void LiveDoctor::publish(attrs::AttributeStore& store) const {
  for (const auto& [name, attr] : store.list())
    if (name.compare(0, 7, "doctor.") == 0 && published_.count(name) == 0) store.clear(name);
  for (const auto& [name, value] : published_) {
    auto old = store.get(name);
    if (old && old->value == value) continue;  // an unchanged value would ship a snapshot for nothing
    Status st = store.set(name, value, attrs::Source::kProbe);
    if (!st.isOk()) TH_INFO(log::kAttrs, "doctor: attribute %s: %s", name.c_str(), st.message().c_str());
  }
}

}  // namespace theseus::doctor
