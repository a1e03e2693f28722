#include "policy/nccl_algorithms.h"

#include <strings.h>

#include <algorithm>

namespace theseus::policy {
namespace {

using schedule::Collective;

const char* const kAlgorithmNames[kNcclAlgorithms] = {"Tree", "Ring", "CollNetDirect", "CollNetChain",
                                                      "NVLS", "NVLSTree", "PAT"};
const char* const kProtocolNames[kNcclProtocols] = {"LL", "LL128", "Simple"};

const std::vector<std::string> kNone;
const std::vector<std::string> kTrees = {"double_binary_tree", "tree"};
const std::vector<std::string> kRing = {"ring"};
const std::vector<std::string> kRecursiveDoubling = {"recursive_doubling"};
const std::vector<std::string> kHalvingDoubling = {"halving_doubling"};

}  // namespace

const char* ncclAlgorithmName(int algo) { return algo >= 0 && algo < kNcclAlgorithms ? kAlgorithmNames[algo] : "?"; }
const char* ncclProtocolName(int proto) { return proto >= 0 && proto < kNcclProtocols ? kProtocolNames[proto] : "?"; }

int ncclAlgorithmIndex(const std::string& name) {
  for (int a = 0; a < kNcclAlgorithms; ++a)
    if (strcasecmp(name.c_str(), kAlgorithmNames[a]) == 0) return a;
  return -1;
}

int ncclProtocolIndex(const std::string& name) {
  for (int p = 0; p < kNcclProtocols; ++p)
    if (strcasecmp(name.c_str(), kProtocolNames[p]) == 0) return p;
  return -1;
}

const std::vector<std::string>& schedulesForNcclAlgorithm(int algo, Collective c) {
  const bool treeShaped = c == Collective::kAllReduce || c == Collective::kBroadcast || c == Collective::kReduce;
  const bool ringShaped = treeShaped || c == Collective::kAllGather || c == Collective::kReduceScatter;
  switch (algo) {
    case 0: return treeShaped ? kTrees : kNone;
    case 1: return ringShaped ? kRing : kNone;
    case 6:
      if (c == Collective::kAllGather) return kRecursiveDoubling;
      if (c == Collective::kReduceScatter) return kHalvingDoubling;
      return kNone;
    default: return kNone;
  }
}

std::vector<std::string> schedulesForNcclAlgorithm(int algo) {
  std::vector<std::string> out;
  for (Collective c : {Collective::kAllReduce, Collective::kAllGather, Collective::kReduceScatter})
    for (const auto& s : schedulesForNcclAlgorithm(algo, c))
      if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(s);
  return out;
}

}  // namespace theseus::policy
