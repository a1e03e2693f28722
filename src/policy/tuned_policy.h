// A policy with an NCCL tuner plugin as an input (nccl_tuner.h).
//
// The tuner's table is asked for at every evaluation (a tuner may change its
// mind; the epoch protocol swaps tables only when a decision changes). With the
// built-in static policy - the thresholds NCCL's own model stands for - the
// tuner's choices replace the static ones for every collective it tunes, as a
// tuner replaces NCCL's model. With a JSON or plugin policy, the policy keeps
// what its rules decide, and the tuner decides where the policy fell back to
// the static choice (collectives and sizes no rule matched, kStaticChoiceWhy)
// or left a collective out.
#pragma once

#include <memory>

#include "policy/nccl_tuner.h"
#include "policy/policy.h"

namespace theseus::policy {

// `innerIsStatic`: `inner` is the built-in static policy.
std::unique_ptr<Policy> withNcclTuner(std::unique_ptr<Policy> inner, bool innerIsStatic,
                                      std::unique_ptr<NcclTuner> tuner);

// THESEUS_POLICY's policy with the configured tuner (NCCL_TUNER_PLUGIN) attached
// when there is one. A tuner that is named but cannot be used is a WARN (once
// per process), and the policy runs without it - what NCCL does.
std::unique_ptr<Policy> attachConfiguredTuner(std::unique_ptr<Policy> inner, bool innerIsStatic,
                                              const TunerContext& ctx);

}  // namespace theseus::policy
