// Prometheus' text exposition format (version 0.0.4), written by the metrics
// server (metrics_server.h) from what every communicator of the process adds.
//
// A family (name, type, help) is declared once however many communicators add
// samples to it, and its samples are rendered together, as the format
// requires. Label values are escaped (backslash, quote, newline); names are
// Theseus' own, valid by construction.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace theseus::telemetry {

class MetricsText {
 public:
  using Labels = std::vector<std::pair<std::string, std::string>>;

  // type: "counter", "gauge" or "histogram". Declaring a family twice keeps the first.
  void family(const std::string& name, const char* type, const std::string& help);
  // One sample of a declared family; `suffix` for histograms ("_bucket", "_sum", "_count").
  void sample(const std::string& name, const Labels& labels, double value, const char* suffix = "");
  std::string render() const;

 private:
  struct Family {
    std::string type;
    std::string help;
    std::vector<std::string> lines;
  };
  std::vector<std::string> order_;
  std::map<std::string, Family> families_;
};

}  // namespace theseus::telemetry
