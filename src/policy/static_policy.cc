// The built-in "static" policy: the text of policies/static.json, compiled in
// so that the default policy needs no file. A unit test keeps the two equal.
#include "policy/policy.h"

namespace theseus::policy {

const char* staticPolicyText() {
  return R"json({
  "version": 1,
  "name": "static",
  "description": "Size thresholds: latency-optimal schedules up to THESEUS_SMALL_MSG_BYTES, bandwidth-optimal ones above. Theseus' default policy; a starting point for your own.",
  "rules": [
    {"name": "small allreduce", "collectives": ["allreduce"], "max_bytes": "$small_msg_bytes",
     "use": {"schedule": ["recursive_doubling", "halving_doubling", "tree", "ring"]}},
    {"name": "large allreduce", "collectives": ["allreduce"],
     "use": {"schedule": ["ring", "halving_doubling", "double_binary_tree", "tree"]}},
    {"name": "small allgather", "collectives": ["allgather"], "max_bytes": "$small_msg_bytes",
     "use": {"schedule": ["recursive_doubling", "direct", "ring"]}},
    {"name": "large allgather", "collectives": ["allgather"],
     "use": {"schedule": ["ring", "direct", "recursive_doubling"]}},
    {"name": "small reducescatter", "collectives": ["reducescatter"], "max_bytes": "$small_msg_bytes",
     "use": {"schedule": ["halving_doubling", "direct", "ring"]}},
    {"name": "large reducescatter", "collectives": ["reducescatter"],
     "use": {"schedule": ["ring", "halving_doubling", "direct"]}},
    {"name": "small broadcast", "collectives": ["broadcast"], "max_bytes": "$small_msg_bytes",
     "use": {"schedule": ["tree", "direct", "ring"]}},
    {"name": "large broadcast", "collectives": ["broadcast"],
     "use": {"schedule": ["ring", "double_binary_tree", "tree", "direct"]}},
    {"name": "small reduce", "collectives": ["reduce"], "max_bytes": "$small_msg_bytes",
     "use": {"schedule": ["tree", "direct", "ring"]}},
    {"name": "large reduce", "collectives": ["reduce"],
     "use": {"schedule": ["ring", "tree", "direct"]}},
    {"name": "personalized exchanges", "collectives": ["alltoall", "gather", "scatter"],
     "use": {"schedule": ["direct", "ring"]}}
  ]
}
)json";
}

}  // namespace theseus::policy
