// NCCL_IB_HCA: which HCAs and ports the IB network uses, in NCCL's syntax.
//
//   "mlx5_0:1,mlx5_1"   only these (name prefixes; ":port" narrows to a port)
//   "^mlx5_2"           every HCA but these
//   "=mlx5_0"           exact names ("^=" excludes exact names)
//
// Unset or empty: every HCA. A name matches an entry by prefix unless "=" was
// given (so "mlx5_1" also selects mlx5_10, as in NCCL).
#pragma once

#include <string>
#include <vector>

namespace theseus::transport::ib {

struct HcaFilter {
  struct Entry {
    std::string name;
    int port = -1;  // -1: any port
  };
  bool exclude = false;
  bool exact = false;
  std::vector<Entry> entries;

  static HcaFilter parse(const std::string& spec);
  bool allows(const std::string& device, int port) const;
  std::string describe() const;  // the spec, normalised
};

}  // namespace theseus::transport::ib
