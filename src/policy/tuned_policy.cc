#include "policy/tuned_policy.h"

#include <algorithm>
#include <atomic>

#include "common/knobs.h"
#include "common/log.h"

namespace theseus::policy {
namespace {

bool ncclProtoSet() {
  const KnobInfo* proto = findKnob("NCCL_PROTO");
  auto value = proto != nullptr ? knobValueText(*proto) : std::nullopt;
  return value && !value->empty();
}

class TunedPolicy final : public Policy {
 public:
  TunedPolicy(std::unique_ptr<Policy> inner, bool innerIsStatic, std::unique_ptr<NcclTuner> tuner)
      : inner_(std::move(inner)), innerIsStatic_(innerIsStatic), tuner_(std::move(tuner)),
        name_(inner_->name() + "+tuner:" + tuner_->name()) {}

  const std::string& name() const override { return name_; }
  std::string describe() const override {
    return inner_->describe() + (innerIsStatic_ ? ", replaced by " : ", completed by ") + tuner_->describe();
  }

  Result<DecisionTable> decide(const PolicyInput& in) override {
    TH_ASSIGN(DecisionTable mine, inner_->decide(in));
    TH_ASSIGN(DecisionTable tuned, tuner_->table(AlgoFilter::fromEnv(), AlgoFilter::protocolsFromEnv()));
    if (!tuned.sameDecisions(lastTuned_)) {
      TH_INFO(log::kTuning, "%s chose (%s):\n%s", tuner_->describe().c_str(),
              innerIsStatic_ ? "replacing the static policy" : "where the policy takes the static choice",
              tuned.describe().c_str());
      lastTuned_ = tuned;
    }
    DecisionTable out;
    out.setVersion(mine.version());
    for (int i = 0; i < DecisionTable::kCollectives; ++i) {
      auto c = static_cast<schedule::Collective>(i);
      if (tuned.ranges(c).empty()) {
        for (const auto& r : mine.ranges(c)) TH_CHECK(out.add(c, r.minBytes, r.maxBytes, r.decision));
      } else if (innerIsStatic_ || mine.ranges(c).empty()) {
        for (const auto& r : tuned.ranges(c)) TH_CHECK(out.add(c, r.minBytes, r.maxBytes, r.decision));
      } else {
        // The policy's own decisions stay; where it fell back to the static choice, the tuner's pieces go in.
        for (const auto& r : mine.ranges(c)) {
          if (r.decision.why != kStaticChoiceWhy) {
            TH_CHECK(out.add(c, r.minBytes, r.maxBytes, r.decision));
            continue;
          }
          for (const auto& u : tuned.ranges(c)) {
            uint64_t lo = std::max(r.minBytes, u.minBytes), hi = std::min(r.maxBytes, u.maxBytes);
            if (lo <= hi) TH_CHECK(out.add(c, lo, hi, u.decision));
          }
        }
      }
    }
    return out;
  }

 private:
  std::unique_ptr<Policy> inner_;
  bool innerIsStatic_;
  std::unique_ptr<NcclTuner> tuner_;
  std::string name_;
  DecisionTable lastTuned_;
};

}  // namespace

std::unique_ptr<Policy> withNcclTuner(std::unique_ptr<Policy> inner, bool innerIsStatic,
                                      std::unique_ptr<NcclTuner> tuner) {
  if (!tuner) return inner;
  return std::make_unique<TunedPolicy>(std::move(inner), innerIsStatic, std::move(tuner));
}

std::unique_ptr<Policy> attachConfiguredTuner(std::unique_ptr<Policy> inner, bool innerIsStatic,
                                              const TunerContext& ctx) {
  auto tuner = NcclTuner::loadConfigured(ctx);
  if (!tuner.isOk()) {
    static std::atomic<bool> warned{false};
    if (!warned.exchange(true))
      TH_WARN("%s; running without the NCCL tuner plugin", tuner.status().message().c_str());
    return inner;
  }
  if (!tuner.value() && ncclProtoSet()) {
    static std::atomic<bool> noted{false};
    if (!noted.exchange(true))
      TH_INFO(log::kTuning | log::kEnv, "NCCL_PROTO has no effect without an NCCL tuner plugin: Theseus runs one "
              "protocol");
  }
  return withNcclTuner(std::move(inner), innerIsStatic, tuner.take());
}

}  // namespace theseus::policy
