// Which job a process belongs to, as its launcher says: ranks of one job share
// the fingerprint, so a rank of another job that reaches the same NCCL_COMM_ID
// rendezvous (two jobs started with one address) is refused instead of joining a
// mixed communicator. Ids from ncclGetUniqueId are random and not checked. THESEUS_JOB_ID, when set, is the identity (theseus-run sets one);
// otherwise the launcher variables that are equal on every rank of a job by
// definition: TORCHELASTIC_RUN_ID (torchrun), SLURM_JOB_ID + SLURM_STEP_ID,
// OMPI_MCA_ess_base_jobid (Open MPI), PMIX_NAMESPACE (PMIx). None set: 0 (no check).
#pragma once

#include <cstdint>
#include <string>

namespace theseus::bootstrap {

uint64_t jobFingerprint();
// "TORCHELASTIC_RUN_ID=abc" (what the fingerprint is made of), "" when nothing is set.
std::string jobIdentity();

}  // namespace theseus::bootstrap
