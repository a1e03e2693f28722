// Every environment variable NVIDIA's NCCL reads (2.28.9 and 2.30.7), and what
// each does in Theseus: honoured (a knob of that name is declared, so its help
// text says how), or no effect (with the reason). docs/configuration.md has the
// table this generates (theseus-config --nccl-variables).
//
// At the first communicator of a process, reportEnvironment() goes over the
// environment once: an NCCL variable that has no effect gets one INFO line
// ("NCCL_X has no effect in Theseus: why"); an NCCL_* or THESEUS_* name that
// neither NCCL nor Theseus knows gets a WARN naming the closest known name (a
// typo such as NCCL_SOCKET_IFNMAE). Names NCCL's ecosystem sets that are not
// NCCL runtime variables (NCCL_VERSION in NVIDIA's containers, NCCL_HOME,
// NCCL_ROOT*, NCCL_INCLUDE_DIR, NCCL_LIB_DIR, NCCL_TESTS_*) and the variables
// of Theseus' own tools (theseus-run's THESEUS_RANK/NRANKS/LOCAL_RANK/LOCAL_SIZE/
// HOST, THESEUS_TEST_*, THESEUS_TORCH_*, THESEUS_GPU_*, THESEUS_FAKE_IBV_*, THESEUS_EXPECT_LIB) are left alone.
#pragma once

#include <string>
#include <vector>

namespace theseus {

struct NcclVariable {
  std::string name;
  bool honoured = false;
  std::string effect;  // honoured: the knob's help; otherwise why it has no effect
};

// Sorted by name.
std::vector<NcclVariable> ncclVariables();

// The known NCCL_*/THESEUS_* name closest to `name` (edit distance), or "" when none is close.
std::string closestKnownName(const std::string& name);

// Once per process (later calls return at once).
void reportEnvironment();

}  // namespace theseus
