// Environment access with NCCL's configuration-file semantics: on first use the
// files $NCCL_CONF_FILE (or ~/.nccl.conf) and /etc/nccl.conf are read and their
// NAME=VALUE lines become environment variables unless already set.
#pragma once

namespace theseus::env {

// getenv() after the configuration files were applied; NULL when unset or empty.
const char* get(const char* name);

}  // namespace theseus::env
