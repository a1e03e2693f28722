// Name patterns over dotted attribute names, for policies and aggregations.
//
// A pattern is a dotted name whose components may hold wildcards:
//   *      any run of characters inside one component ("link.*.*.gbps",
//          "node.*.nic.mlx5_*.healthy"); never crosses a dot
//   ?      one character inside a component
//   **     (a whole component) one or more components ("node.**.healthy"
//          matches node.h1.healthy and node.h1.nic.mlx5_0.healthy)
// Everything else matches itself. Matching allocates nothing.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace theseus::attrs {

class Pattern {
 public:
  // Errors name the pattern and the problem (empty component, bad character).
  static Result<Pattern> compile(const std::string& text);

  bool matches(std::string_view name) const;
  const std::string& text() const { return text_; }
  // No wildcard at all: matches exactly one name.
  bool isLiteral() const { return literal_; }
  // The longest literal start every match has ("link." for "link.*.*.gbps"),
  // so a sorted map can be scanned from lower_bound(prefix).
  const std::string& literalPrefix() const { return prefix_; }

 private:
  bool matchFrom(size_t part, std::string_view rest) const;

  std::string text_;
  std::vector<std::string> parts_;
  bool literal_ = true;
  std::string prefix_;
};

}  // namespace theseus::attrs
