#include "telemetry/metrics.h"

#include <cmath>
#include <cstdio>

namespace theseus::telemetry {
namespace {

std::string escape(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[40];
  if (v == std::floor(v) && std::fabs(v) < 1e15) snprintf(buf, sizeof(buf), "%.0f", v);
  else snprintf(buf, sizeof(buf), "%.9g", v);
  return buf;
}

}  // namespace

void MetricsText::family(const std::string& name, const char* type, const std::string& help) {
  if (families_.count(name) != 0) return;
  order_.push_back(name);
  families_[name] = Family{type, help, {}};
}

void MetricsText::sample(const std::string& name, const Labels& labels, double value, const char* suffix) {
  auto it = families_.find(name);
  if (it == families_.end()) return;
  std::string line = name + suffix;
  if (!labels.empty()) {
    line += '{';
    for (size_t i = 0; i < labels.size(); ++i)
      line += (i ? "," : "") + labels[i].first + "=\"" + escape(labels[i].second) + "\"";
    line += '}';
  }
  line += ' ' + number(value) + '\n';
  it->second.lines.push_back(std::move(line));
}

std::string MetricsText::render() const {
  std::string out;
  for (const std::string& name : order_) {
    const Family& f = families_.at(name);  // declared families appear even before their first sample
    std::string help;
    for (char c : f.help) help += c == '\n' ? std::string("\\n") : c == '\\' ? std::string("\\\\") : std::string(1, c);
    out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + f.type + "\n";
    for (const std::string& l : f.lines) out += l;
  }
  return out;
}

}  // namespace theseus::telemetry
