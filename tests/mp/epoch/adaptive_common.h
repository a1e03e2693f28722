// Helpers shared by the adaptation test (tests/mp/epoch) and the adaptive
// benchmark (tests/bench/adaptive): decision-log parsing and ring checks.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "nccl.h"
#include "theseus/theseus.h"

namespace theseus::test {

struct LoggedTable {
  uint64_t seq = 0;
  uint64_t version = 0;
  std::string schedule;  // allreduce decision for the size asked for
  std::vector<int> order;
  std::string reason;
};

inline std::string decisionLogOf(ncclComm_t comm) {
  size_t needed = 0;
  if (theseusGetDecisionLog(comm, nullptr, 0, &needed) != ncclSuccess) return "";
  std::string text(needed, '\0');
  if (theseusGetDecisionLog(comm, text.data(), needed, &needed) != ncclSuccess) return "";
  text.resize(needed - 1);
  return text;
}

// Every table of the log with its allreduce decision for messages of `bytes`.
inline std::vector<LoggedTable> allreduceTables(const std::string& log, uint64_t bytes) {
  std::vector<LoggedTable> out;
  std::istringstream in(log);
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded()) continue;
    LoggedTable t;
    t.seq = j.value("seq", 0ull);
    t.version = j.value("version", 0ull);
    t.reason = j.value("reason", "");
    for (const auto& r : j["table"]) {
      if (r.value("collective", "") != "allreduce" || r.value("min", 0ull) > bytes) continue;
      t.schedule = r.value("schedule", "");
      t.order.clear();
      std::string params = r.value("params", "");
      size_t p = params.find("order=");
      if (p != std::string::npos) {
        std::istringstream os(params.substr(p + 6, params.find(';', p) - p - 6));
        std::string item;
        while (std::getline(os, item, ',')) t.order.push_back(std::stoi(item));
      }
    }
    out.push_back(t);
  }
  return out;
}

// Whether a ring in `order` (identity when empty) sends from a to b.
inline bool ringUses(const std::vector<int>& order, int n, int a, int b) {
  for (int i = 0; i < n; ++i) {
    int from = order.empty() ? i : order[i];
    int to = order.empty() ? (i + 1) % n : order[(i + 1) % n];
    if (from == a && to == b) return true;
  }
  return false;
}

// The table in effect for collective `seq`.
inline const LoggedTable* tableAt(const std::vector<LoggedTable>& tables, uint64_t seq) {
  const LoggedTable* t = nullptr;
  for (const auto& x : tables)
    if (x.seq <= seq) t = &x;
  return t;
}

}  // namespace theseus::test
