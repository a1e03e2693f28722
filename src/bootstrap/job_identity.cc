#include "bootstrap/job_identity.h"

#include "common/env.h"
#include "common/knobs.h"

namespace theseus::bootstrap {
namespace {

const StringKnob kJobId("THESEUS_JOB_ID", nullptr,
                        "Identity of the job this process belongs to (equal on all its ranks; theseus-run sets one): "
                        "a rank of another job that reaches the same bootstrap root (two jobs started with one "
                        "NCCL_COMM_ID) is refused. Unset: the launcher's TORCHELASTIC_RUN_ID, SLURM_JOB_ID/"
                        "SLURM_STEP_ID, OMPI_MCA_ess_base_jobid or PMIX_NAMESPACE");

const char* const kLauncherVars[] = {"TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", "SLURM_STEP_ID",
                                     "OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE"};

}  // namespace

std::string jobIdentity() {
  if (kJobId.isSet()) return "THESEUS_JOB_ID=" + kJobId.get();
  std::string out;
  for (const char* name : kLauncherVars)
    if (const char* v = env::get(name)) out += (out.empty() ? "" : " ") + std::string(name) + "=" + v;
  return out;
}

uint64_t jobFingerprint() {
  const std::string id = jobIdentity();
  if (id.empty()) return 0;
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : id) h = (h ^ c) * 1099511628211ull;
  return h;
}

}  // namespace theseus::bootstrap
