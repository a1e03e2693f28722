#include "transport/ib/ib_hca_filter.h"

#include <cstdlib>

namespace theseus::transport::ib {

HcaFilter HcaFilter::parse(const std::string& spec) {
  HcaFilter f;
  size_t i = 0;
  if (i < spec.size() && spec[i] == '^') f.exclude = true, ++i;
  if (i < spec.size() && spec[i] == '=') f.exact = true, ++i;
  while (i <= spec.size()) {
    size_t comma = spec.find(',', i);
    std::string item = spec.substr(i, comma == std::string::npos ? std::string::npos : comma - i);
    i = comma == std::string::npos ? spec.size() + 1 : comma + 1;
    while (!item.empty() && item.back() == ' ') item.pop_back();
    while (!item.empty() && item.front() == ' ') item.erase(0, 1);
    if (item.empty()) continue;
    Entry e;
    size_t colon = item.find(':');
    e.name = item.substr(0, colon);
    if (colon != std::string::npos) {
      char* end = nullptr;
      long port = std::strtol(item.c_str() + colon + 1, &end, 10);
      e.port = (end != nullptr && *end == '\0' && port > 0 && port < 256) ? static_cast<int>(port) : 0;  // 0: no port
    }
    if (!e.name.empty()) f.entries.push_back(std::move(e));
  }
  return f;
}

bool HcaFilter::allows(const std::string& device, int port) const {
  if (entries.empty()) return true;
  bool listed = false;
  for (const Entry& e : entries) {
    bool nameMatches = exact ? device == e.name : device.compare(0, e.name.size(), e.name) == 0;
    if (nameMatches && (e.port < 0 || e.port == port)) {
      listed = true;
      break;
    }
  }
  return exclude ? !listed : listed;
}

std::string HcaFilter::describe() const {
  std::string s = std::string(exclude ? "^" : "") + (exact ? "=" : "");
  for (size_t i = 0; i < entries.size(); ++i) {
    s += (i ? "," : "") + entries[i].name;
    if (entries[i].port >= 0) s += ":" + std::to_string(entries[i].port);
  }
  return s;
}

}  // namespace theseus::transport::ib
