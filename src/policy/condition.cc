#include "policy/condition.h"

#include <cctype>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace theseus::policy {

struct Condition::Node {
  enum Kind {
    kNumber, kBool, kRanks, kNodes, kSlowLinks, kAttr, kAggregate, kExists,
    kNeg, kAdd, kSub, kMul, kDiv,
    kLt, kLe, kGt, kGe, kEq, kNe,
    kAnd, kOr, kNot,
  };
  Kind kind = kNumber;
  double number = 0;
  bool truth = false;
  std::string name;                 // kAttr
  attrs::Aggregate aggregate = attrs::Aggregate::kMin;
  std::optional<attrs::Pattern> pattern;  // kAggregate, kExists
  std::shared_ptr<const Node> a, b;

  bool isBool() const { return kind == kBool || kind == kExists || (kind >= kLt && kind <= kNot); }
};

namespace {

using Node = Condition::Node;
using NodePtr = std::shared_ptr<const Node>;

bool nameStart(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool nameChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == ':'; }

// Recursive-descent parser; positions in errors are 1-based characters. Nesting
// (parentheses, 'not', unary '-') and the number of operators are bounded, so a
// hostile or generated condition gets an error instead of exhausting the stack
// of the parser, of evaluation or of the tree's destruction (all recursive).
constexpr int kMaxNesting = 64;
constexpr size_t kMaxOperators = 4096;

class Parser {
 public:
  explicit Parser(const std::string& text) : s_(text) {}

  Result<NodePtr> parseAll() {
    NodePtr n;
    TH_ASSIGN(n, parseOr());
    skipSpace();
    if (pos_ < s_.size()) return error(pos_, "unexpected '%s' after the end of the expression", rest().c_str());
    if (!n->isBool()) return error(0, "the condition is a number, not a comparison or a boolean");
    return n;
  }

 private:
  Status error(size_t at, const char* fmt, ...) __attribute__((format(printf, 3, 4))) {
    char text[256];
    va_list args;
    va_start(args, fmt);
    vsnprintf(text, sizeof(text), fmt, args);
    va_end(args);
    return invalidArgument("at character %zu: %s", at + 1, text);
  }
  std::string rest() const { return s_.substr(pos_, 12); }
  void skipSpace() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  // Consumes `op` (after spaces) when it comes next; words must end there.
  bool accept(const char* op) {
    skipSpace();
    size_t n = strlen(op);
    if (s_.compare(pos_, n, op) != 0) return false;
    if (nameStart(op[0]) && pos_ + n < s_.size() && nameChar(s_[pos_ + n])) return false;
    pos_ += n;
    return true;
  }
  // Counts one nesting level for its scope.
  struct Nest {
    explicit Nest(int* depth) : depth_(depth) { ++*depth_; }
    ~Nest() { --*depth_; }
    int* depth_;
  };
  Status tooDeep(size_t at) {
    return error(at, "the condition nests more than %d levels deep (parentheses, 'not', '-')", kMaxNesting);
  }
  // An operator node; the caller checks operatorsLeft() first.
  bool operatorsLeft() { return ++operators_ <= kMaxOperators; }
  Status tooMany(size_t at) { return error(at, "the condition has more than %zu operators", kMaxOperators); }

  static NodePtr make(Node::Kind k, NodePtr a = nullptr, NodePtr b = nullptr) {
    auto n = std::make_shared<Node>();
    n->kind = k;
    n->a = std::move(a);
    n->b = std::move(b);
    return n;
  }
  Status expect(const NodePtr& n, bool wantBool, size_t at, const char* role) {
    if (n->isBool() == wantBool) return Status::ok();
    return error(at, "%s needs %s, got %s", role, wantBool ? "a boolean (a comparison)" : "a number",
                 wantBool ? "a number" : "a boolean");
  }

  Result<NodePtr> parseOr() {
    size_t at = (skipSpace(), pos_);
    Nest nest(&depth_);
    if (depth_ > kMaxNesting) return tooDeep(at);
    NodePtr left;
    TH_ASSIGN(left, parseAnd());
    while (accept("or") || accept("||")) {
      TH_CHECK(expect(left, true, at, "'or'"));
      size_t rightAt = (skipSpace(), pos_);
      NodePtr right;
      TH_ASSIGN(right, parseAnd());
      TH_CHECK(expect(right, true, rightAt, "'or'"));
      if (!operatorsLeft()) return tooMany(rightAt);
      left = make(Node::kOr, left, right);
    }
    return left;
  }

  Result<NodePtr> parseAnd() {
    size_t at = (skipSpace(), pos_);
    NodePtr left;
    TH_ASSIGN(left, parseNot());
    while (accept("and") || accept("&&")) {
      TH_CHECK(expect(left, true, at, "'and'"));
      size_t rightAt = (skipSpace(), pos_);
      NodePtr right;
      TH_ASSIGN(right, parseNot());
      TH_CHECK(expect(right, true, rightAt, "'and'"));
      if (!operatorsLeft()) return tooMany(rightAt);
      left = make(Node::kAnd, left, right);
    }
    return left;
  }

  Result<NodePtr> parseNot() {
    skipSpace();
    if (s_.compare(pos_, 2, "!=") != 0 && (accept("not") || accept("!"))) {
      size_t at = (skipSpace(), pos_);
      Nest nest(&depth_);
      if (depth_ > kMaxNesting) return tooDeep(at);
      if (!operatorsLeft()) return tooMany(at);
      NodePtr inner;
      TH_ASSIGN(inner, parseNot());
      TH_CHECK(expect(inner, true, at, "'not'"));
      return make(Node::kNot, inner);
    }
    return parseCompare();
  }

  Result<NodePtr> parseCompare() {
    size_t at = (skipSpace(), pos_);
    NodePtr left;
    TH_ASSIGN(left, parseSum());
    static const std::pair<const char*, Node::Kind> kOps[] = {{"<=", Node::kLe}, {">=", Node::kGe}, {"==", Node::kEq},
                                                              {"!=", Node::kNe}, {"<", Node::kLt},  {">", Node::kGt}};
    for (const auto& [op, kind] : kOps) {
      if (!accept(op)) continue;
      TH_CHECK(expect(left, false, at, "a comparison"));
      size_t rightAt = (skipSpace(), pos_);
      NodePtr right;
      TH_ASSIGN(right, parseSum());
      TH_CHECK(expect(right, false, rightAt, "a comparison"));
      skipSpace();
      for (const auto& [op2, kind2] : kOps)
        if (s_.compare(pos_, strlen(op2), op2) == 0)
          return error(pos_, "comparisons cannot be chained; combine them with 'and'");
      return make(kind, left, right);
    }
    return left;
  }

  Result<NodePtr> parseSum() {
    size_t at = (skipSpace(), pos_);
    NodePtr left;
    TH_ASSIGN(left, parseProduct());
    while (true) {
      Node::Kind k;
      if (accept("+")) k = Node::kAdd;
      else if (accept("-")) k = Node::kSub;
      else break;
      TH_CHECK(expect(left, false, at, "arithmetic"));
      size_t rightAt = (skipSpace(), pos_);
      NodePtr right;
      TH_ASSIGN(right, parseProduct());
      TH_CHECK(expect(right, false, rightAt, "arithmetic"));
      if (!operatorsLeft()) return tooMany(rightAt);
      left = make(k, left, right);
    }
    return left;
  }

  Result<NodePtr> parseProduct() {
    size_t at = (skipSpace(), pos_);
    NodePtr left;
    TH_ASSIGN(left, parseUnary());
    while (true) {
      Node::Kind k;
      if (accept("*")) k = Node::kMul;
      else if (accept("/")) k = Node::kDiv;
      else break;
      TH_CHECK(expect(left, false, at, "arithmetic"));
      size_t rightAt = (skipSpace(), pos_);
      NodePtr right;
      TH_ASSIGN(right, parseUnary());
      TH_CHECK(expect(right, false, rightAt, "arithmetic"));
      if (!operatorsLeft()) return tooMany(rightAt);
      left = make(k, left, right);
    }
    return left;
  }

  Result<NodePtr> parseUnary() {
    if (accept("-")) {
      size_t at = (skipSpace(), pos_);
      Nest nest(&depth_);
      if (depth_ > kMaxNesting) return tooDeep(at);
      if (!operatorsLeft()) return tooMany(at);
      NodePtr inner;
      TH_ASSIGN(inner, parseUnary());
      TH_CHECK(expect(inner, false, at, "'-'"));
      return make(Node::kNeg, inner);
    }
    return parsePrimary();
  }

  Result<NodePtr> parsePrimary();
  Result<NodePtr> parseNumber();
  Result<NodePtr> parseCall(const std::string& function, size_t at);

  const std::string& s_;
  size_t pos_ = 0;
  int depth_ = 0;
  size_t operators_ = 0;
};

Result<NodePtr> Parser::parseNumber() {
  const char* begin = s_.c_str() + pos_;
  char* end = nullptr;
  double v = strtod(begin, &end);
  size_t at = pos_;
  pos_ += static_cast<size_t>(end - begin);
  if (pos_ < s_.size() && nameChar(s_[pos_]) && s_[pos_] != '.')
    return error(at, "'%s' is not a number (sizes and units are not allowed in conditions)",
                 s_.substr(at, pos_ - at + 4).c_str());
  if (!std::isfinite(v)) return error(at, "number out of range");
  auto n = std::make_shared<Node>();
  n->kind = Node::kNumber;
  n->number = v;
  return NodePtr(n);
}

Result<NodePtr> Parser::parseCall(const std::string& function, size_t at) {
  // The argument is a raw pattern up to ')', optionally in single quotes.
  size_t open = pos_;
  size_t close = s_.find(')', open);
  if (close == std::string::npos) return error(open, "'%s(' has no closing ')'", function.c_str());
  std::string arg = s_.substr(open + 1, close - open - 1);
  size_t b = arg.find_first_not_of(" \t\n"), e = arg.find_last_not_of(" \t\n");
  arg = b == std::string::npos ? std::string() : arg.substr(b, e - b + 1);
  if (arg.size() >= 2 && arg.front() == '\'' && arg.back() == '\'') arg = arg.substr(1, arg.size() - 2);
  if (arg.empty()) return error(open + 1, "%s() needs an attribute name pattern", function.c_str());
  auto pattern = attrs::Pattern::compile(arg);
  if (!pattern.isOk()) return error(open + 1, "%s", pattern.status().message().c_str());
  pos_ = close + 1;
  auto n = std::make_shared<Node>();
  n->pattern = pattern.take();
  if (function == "exists") {
    n->kind = Node::kExists;
  } else {
    n->kind = Node::kAggregate;
    if (!attrs::parseAggregate(function, &n->aggregate))
      return error(at, "unknown function '%s' (known: min, max, mean, median, sum, count, exists)", function.c_str());
  }
  return NodePtr(n);
}

Result<NodePtr> Parser::parsePrimary() {
  skipSpace();
  if (pos_ >= s_.size()) return error(pos_, "expression ends where a value was expected");
  const size_t at = pos_;
  const char c = s_[pos_];
  if (c == '(') {
    ++pos_;
    NodePtr inner;
    TH_ASSIGN(inner, parseOr());
    if (!accept(")")) return error(pos_, "expected ')' to close the '(' at character %zu", at + 1);
    return inner;
  }
  if (std::isdigit(static_cast<unsigned char>(c)) || (c == '.' && pos_ + 1 < s_.size() &&
                                                      std::isdigit(static_cast<unsigned char>(s_[pos_ + 1]))))
    return parseNumber();
  std::string word;
  bool quoted = c == '\'';
  if (quoted) {
    size_t close = s_.find('\'', pos_ + 1);
    if (close == std::string::npos) return error(at, "quoted name has no closing quote");
    word = s_.substr(pos_ + 1, close - pos_ - 1);
    pos_ = close + 1;
  } else if (nameStart(c)) {
    while (pos_ < s_.size() && nameChar(s_[pos_])) ++pos_;
    word = s_.substr(at, pos_ - at);
  } else {
    return error(at, "unexpected '%s' where a value was expected", rest().c_str());
  }
  if (!quoted) {
    skipSpace();
    if (pos_ < s_.size() && s_[pos_] == '(') return parseCall(word, at);
    auto n = std::make_shared<Node>();
    if (word == "true" || word == "false") {
      n->kind = Node::kBool;
      n->truth = word == "true";
      return NodePtr(n);
    }
    if (word == "nranks" || word == "nnodes" || word == "slow_links") {
      n->kind = word == "nranks" ? Node::kRanks : word == "nnodes" ? Node::kNodes : Node::kSlowLinks;
      return NodePtr(n);
    }
    if (pos_ < s_.size() && (s_[pos_] == '*' || s_[pos_] == '?') && !word.empty() && word.back() == '.')
      return error(at, "'%s%c...' is a pattern: use it inside min(), max(), mean(), median(), sum(), count() or "
                   "exists()", word.c_str(), s_[pos_]);
  }
  Status st = attrs::checkName(word);
  if (!st.isOk()) return error(at, "%s", st.message().c_str());
  auto n = std::make_shared<Node>();
  n->kind = Node::kAttr;
  n->name = word;
  return NodePtr(n);
}

// Evaluation with Kleene's three-valued logic; std::nullopt is "unknown".
using Num = std::optional<double>;
using Truth = std::optional<bool>;

Num evalNum(const Node& n, const ConditionContext& ctx);
Truth evalBool(const Node& n, const ConditionContext& ctx, int lean);

Num evalNum(const Node& n, const ConditionContext& ctx) {
  switch (n.kind) {
    case Node::kNumber: return n.number;
    case Node::kRanks: return static_cast<double>(ctx.nranks);
    case Node::kNodes: return static_cast<double>(ctx.nnodes);
    case Node::kSlowLinks: return ctx.slowLinks >= 0 ? Num(ctx.slowLinks) : std::nullopt;
    case Node::kAttr: return ctx.view->value(n.name, ctx.nowNs, ctx.maxAgeNs);
    case Node::kAggregate: return ctx.view->aggregate(*n.pattern, n.aggregate, ctx.nowNs, ctx.maxAgeNs);
    case Node::kNeg: {
      Num v = evalNum(*n.a, ctx);
      return v ? Num(-*v) : std::nullopt;
    }
    default: break;
  }
  Num a = evalNum(*n.a, ctx), b = evalNum(*n.b, ctx);
  if (!a || !b) return std::nullopt;
  switch (n.kind) {
    case Node::kAdd: return *a + *b;
    case Node::kSub: return *a - *b;
    case Node::kMul: return *a * *b;
    case Node::kDiv: return *b == 0 ? std::nullopt : Num(*a / *b);
    default: return std::nullopt;
  }
}

Truth compare(Node::Kind k, double a, double b, double slack) {
  switch (k) {
    case Node::kLt: return a < b + slack;
    case Node::kLe: return a <= b + slack;
    case Node::kGt: return a > b - slack;
    case Node::kGe: return a >= b - slack;
    case Node::kEq: return a == b;
    case Node::kNe: return a != b;
    default: return std::nullopt;
  }
}

Truth evalBool(const Node& n, const ConditionContext& ctx, int lean) {
  switch (n.kind) {
    case Node::kBool: return n.truth;
    case Node::kExists: return ctx.view->aggregate(*n.pattern, attrs::Aggregate::kCount, ctx.nowNs, ctx.maxAgeNs) > 0;
    case Node::kNot: {
      Truth v = evalBool(*n.a, ctx, -lean);
      return v ? Truth(!*v) : std::nullopt;
    }
    case Node::kAnd: {
      Truth a = evalBool(*n.a, ctx, lean), b = evalBool(*n.b, ctx, lean);
      if (a == false || b == false) return false;
      if (!a || !b) return std::nullopt;
      return true;
    }
    case Node::kOr: {
      Truth a = evalBool(*n.a, ctx, lean), b = evalBool(*n.b, ctx, lean);
      if (a == true || b == true) return true;
      if (!a || !b) return std::nullopt;
      return false;
    }
    default: break;
  }
  Num a = evalNum(*n.a, ctx), b = evalNum(*n.b, ctx);
  if (!a || !b) return std::nullopt;
  // lean > 0 widens the comparison towards true, lean < 0 narrows it.
  double slack = lean * ctx.margin * std::fabs(*b);
  return compare(n.kind, *a, *b, slack);
}

}  // namespace

Result<Condition> Condition::parse(const std::string& text) {
  Parser p(text);
  Condition c;
  c.text_ = text;
  TH_ASSIGN(c.root_, p.parseAll());
  return c;
}

namespace {
bool mentions(const Condition::Node* n, Condition::Node::Kind k) {
  return n != nullptr && (n->kind == k || mentions(n->a.get(), k) || mentions(n->b.get(), k));
}
}  // namespace

bool Condition::usesSlowLinks() const { return mentions(root_.get(), Node::kSlowLinks); }

std::optional<bool> Condition::eval(const ConditionContext& ctx) const {
  if (!root_ || ctx.view == nullptr) return std::nullopt;
  return evalBool(*root_, ctx, ctx.lean > 0 ? 1 : (ctx.lean < 0 ? -1 : 0));
}

}  // namespace theseus::policy
