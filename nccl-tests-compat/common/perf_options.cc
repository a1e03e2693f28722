#include "perf_options.h"

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <sstream>

namespace theseus::perf {
namespace {

Status parseInt(const std::string& flag, const std::string& text, long long lo, long long hi, long long* out) {
  errno = 0;
  char* end = nullptr;
  long long v = strtoll(text.c_str(), &end, 0);
  if (text.empty() || errno != 0 || end == nullptr || *end != '\0')
    return usageError("%s: '%s' is not an integer", flag.c_str(), text.c_str());
  if (v < lo || v > hi) return usageError("%s: %lld is out of range [%lld, %lld]", flag.c_str(), v, lo, hi);
  *out = v;
  return Status::ok();
}

template <typename T>
Status intInto(const std::string& flag, const std::string& text, long long lo, long long hi, T* dst) {
  long long v = 0;
  PERF_CHECK(parseInt(flag, text, lo, hi, &v));
  *dst = static_cast<T>(v);
  return Status::ok();
}

Status parseTypes(const std::string& text, std::vector<ncclDataType_t>* out) {
  if (text == "all") {
    *out = allTypes();
    return Status::ok();
  }
  std::vector<ncclDataType_t> types;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    auto t = parseTypeName(item);
    if (!t) {
      return usageError("-d: unknown datatype '%s' (int8 uint8 int32 uint32 int64 uint64 half float double "
                        "bfloat16 f8e4m3 f8e5m2 all)", item.c_str());
    }
    types.push_back(*t);
  }
  if (types.empty()) return usageError("-d: no datatype given");
  *out = types;
  return Status::ok();
}

Status parseOps(const std::string& text, std::vector<OpKind>* out) {
  if (text == "all") {
    *out = allOps();
    return Status::ok();
  }
  std::vector<OpKind> ops;  // (opsAll is set by the caller)
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    auto op = parseOpName(item);
    if (!op) return usageError("-o: unknown operation '%s' (sum prod max min avg mulsum all)", item.c_str());
    ops.push_back(*op);
  }
  if (ops.empty()) return usageError("-o: no operation given");
  *out = ops;
  return Status::ok();
}

using Setter = std::function<Status(const std::string& flag, const std::string& value, Options* o)>;

struct Flag {
  char shortName;        // 0: long only
  const char* longName;
  bool takesValue;
  Setter set;
};

const std::vector<Flag>& flags() {
  static const std::vector<Flag> table = {
      {'t', "nthreads", true, [](auto& f, auto& v, Options* o) { return intInto(f, v, 1, 1024, &o->nThreads); }},
      {'g', "ngpus", true, [](auto& f, auto& v, Options* o) { return intInto(f, v, 1, 1024, &o->nGpus); }},
      {'b', "minbytes", true, [](auto&, auto& v, Options* o) { return parseSize(v, &o->minBytes); }},
      {'e', "maxbytes", true, [](auto&, auto& v, Options* o) { return parseSize(v, &o->maxBytes); }},
      {'i', "stepbytes", true, [](auto&, auto& v, Options* o) { return parseSize(v, &o->stepBytes); }},
      {'f', "stepfactor", true,
       [](auto& f, auto& v, Options* o) { return intInto(f, v, 1, 1 << 20, &o->stepFactor); }},
      {'n', "iters", true, [](auto& f, auto& v, Options* o) { return intInto(f, v, 0, INT_MAX, &o->iters); }},
      {'w', "warmup_iters", true,
       [](auto& f, auto& v, Options* o) { return intInto(f, v, 0, INT_MAX, &o->warmupIters); }},
      {'m', "agg_iters", true, [](auto& f, auto& v, Options* o) { return intInto(f, v, 1, 1 << 20, &o->aggIters); }},
      {'N', "run_cycles", true, [](auto& f, auto& v, Options* o) { return intInto(f, v, 0, INT_MAX, &o->runCycles); }},
      {'p', "parallel_init", true,
       [](auto& f, auto& v, Options* o) { return intInto(f, v, 0, 1, &o->parallelInit); }},
      {'c', "check", true, [](auto& f, auto& v, Options* o) { return intInto(f, v, 0, INT_MAX, &o->check); }},
      {'o', "op", true,
       [](auto&, auto& v, Options* o) {
         o->opsAll = v == "all";
         return parseOps(v, &o->ops);
       }},
      {'d', "datatype", true, [](auto&, auto& v, Options* o) { return parseTypes(v, &o->types); }},
      {'r', "root", true,
       [](auto& f, auto& v, Options* o) {
         if (v == "all") {
           o->root = -1;
           return Status::ok();
         }
         return intInto(f, v, -1, INT_MAX, &o->root);
       }},
      {'z', "blocking", true, [](auto& f, auto& v, Options* o) { return intInto(f, v, 0, 3, &o->blocking); }},
      {'y', "stream_null", true, [](auto& f, auto& v, Options* o) { return intInto(f, v, 0, 1, &o->streamNull); }},
      {'T', "timeout", true,
       [](auto& f, auto& v, Options* o) {
         char* end = nullptr;
         double d = strtod(v.c_str(), &end);
         if (v.empty() || *end != '\0' || !(d >= 0) || d > 1e7)
           return usageError("%s: '%s' is not a number of seconds", f.c_str(), v.c_str());
         o->timeoutSec = d;
         return Status::ok();
       }},
      {'G', "cudagraph", true,
       [](auto& f, auto& v, Options* o) {
         PERF_CHECK(intInto(f, v, 0, INT_MAX, &o->graphLaunches));
         if (o->graphLaunches != 0) return usageError("%s: CUDA graph capture is not supported by this harness", f.c_str());
         return Status::ok();
       }},
      {'C', "report_cputime", true,
       [](auto& f, auto& v, Options* o) { return intInto(f, v, 0, 1, &o->reportCpuTime); }},
      {'a', "average", true, [](auto& f, auto& v, Options* o) { return intInto(f, v, 0, 3, &o->average); }},
      {'R', "local_register", true,
       [](auto& f, auto& v, Options* o) { return intInto(f, v, 0, 2, &o->localRegister); }},
      {'x', "cta_policy", true, [](auto& f, auto& v, Options* o) { return intInto(f, v, 0, 2, &o->ctaPolicy); }},
      {'u', "unalign", true, [](auto& f, auto& v, Options* o) { return intInto(f, v, 0, 1 << 20, &o->unalign); }},
      {'J', "output_file", true,
       [](auto& f, auto& v, Options* o) {
         if (v.empty()) return usageError("%s: empty file name", f.c_str());
         o->jsonPath = v;
         return Status::ok();
       }},
      {'h', "help", false, [](auto&, auto&, Options* o) { o->help = true; return Status::ok(); }},
      {0, "host", false,
       [](auto&, auto&, Options* o) { o->memory = MemoryMode::kHost; return Status::ok(); }},
      {0, "malloc", false, [](auto&, auto&, Options* o) { o->useMalloc = true; return Status::ok(); }},
      {0, "in_place", true,
       [](auto& f, auto& v, Options* o) {
         int on = 1;
         PERF_CHECK(intInto(f, v, 0, 1, &on));
         o->inPlace = on != 0;
         return Status::ok();
       }},
  };
  return table;
}

Status validate(const Options& o) {
  if (o.minBytes > o.maxBytes)
    return usageError("invalid sizes: minbytes (%zu) > maxbytes (%zu)", o.minBytes, o.maxBytes);
  if (o.stepFactor > 1 && o.minBytes == 0 && o.maxBytes > 0)
    return usageError("-f %llu needs -b > 0 (a factor never leaves size 0)",
                      static_cast<unsigned long long>(o.stepFactor));
  if (o.stepFactor <= 1 && o.stepBytes == 0 && o.minBytes < o.maxBytes)
    return usageError("-i 0 never reaches maxbytes; give -i > 0 or -f > 1");
  return Status::ok();
}

}  // namespace

Status parseSize(const std::string& text, size_t* out) {
  if (text.empty()) return usageError("empty size");
  char* end = nullptr;
  errno = 0;
  unsigned long long v = strtoull(text.c_str(), &end, 10);
  if (end == text.c_str() || errno != 0 || text[0] == '-') return usageError("'%s' is not a size", text.c_str());
  unsigned shift = 0;
  if (*end != '\0') {
    switch (*end) {
      case 'k': case 'K': shift = 10; break;
      case 'm': case 'M': shift = 20; break;
      case 'g': case 'G': shift = 30; break;
      default: return usageError("'%s': unknown size suffix '%s' (use K, M or G)", text.c_str(), end);
    }
    if (end[1] != '\0') return usageError("'%s': trailing characters after the size suffix", text.c_str());
  }
  if (shift > 0 && v > (ULLONG_MAX >> shift)) return usageError("'%s' is too large", text.c_str());
  *out = static_cast<size_t>(v << shift);
  return Status::ok();
}

Status parseOptions(int argc, const char* const* argv, Options* out) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    const Flag* flag = nullptr;
    std::string value;
    bool inlineValue = false;
    if (arg.rfind("--", 0) == 0 && arg.size() > 2) {
      std::string name = arg.substr(2);
      size_t eq = name.find('=');
      if (eq != std::string::npos) {
        value = name.substr(eq + 1);
        name = name.substr(0, eq);
        inlineValue = true;
      }
      for (const Flag& f : flags())
        if (name == f.longName) flag = &f;
      if (flag == nullptr) return usageError("unknown option '--%s' (see -h)", name.c_str());
    } else if (arg.size() >= 2 && arg[0] == '-' && arg[1] != '-') {
      for (const Flag& f : flags())
        if (f.shortName == arg[1]) flag = &f;
      if (flag == nullptr) return usageError("unknown option '-%c' (see -h)", arg[1]);
      if (arg.size() > 2) {
        value = arg.substr(2);
        inlineValue = true;
      }
    } else {
      return usageError("unexpected argument '%s' (see -h)", arg.c_str());
    }
    std::string shown = flag->shortName ? std::string("-") + flag->shortName : std::string("--") + flag->longName;
    if (flag->takesValue && !inlineValue) {
      if (i + 1 >= argc) return usageError("%s needs a value", shown.c_str());
      value = argv[++i];
    } else if (!flag->takesValue && inlineValue) {
      return usageError("%s takes no value", shown.c_str());
    }
    PERF_CHECK(flag->set(shown, value, &o));
  }
  if (!o.help) PERF_CHECK(validate(o));
  *out = o;
  return Status::ok();
}

std::vector<size_t> sweepSizes(const Options& o) {
  std::vector<size_t> sizes;
  size_t size = o.minBytes;
  for (;;) {
    sizes.push_back(size);
    if (size >= o.maxBytes) break;
    size_t next;
    if (o.stepFactor > 1) {
      if (size > SIZE_MAX / o.stepFactor) break;
      next = size * o.stepFactor;
    } else {
      next = size + o.stepBytes;
    }
    if (next <= size || next > o.maxBytes) break;
    size = next;
  }
  return sizes;
}

std::string usageText(const char* program) {
  return strprintf(
      "USAGE: %s [options]\n"
      "  -t,--nthreads <n>         threads per process (1)\n"
      "  -g,--ngpus <n>            ranks (GPUs) per thread (1)\n"
      "  -b,--minbytes <size>      smallest size, suffix K/M/G (32M)\n"
      "  -e,--maxbytes <size>      largest size (32M)\n"
      "  -i,--stepbytes <size>     fixed increment between sizes (1M)\n"
      "  -f,--stepfactor <n>       multiplicative increment (disabled)\n"
      "  -n,--iters <n>            timed iterations (20)\n"
      "  -w,--warmup_iters <n>     warmup iterations (1)\n"
      "  -m,--agg_iters <n>        operations aggregated per iteration in one group (1)\n"
      "  -N,--run_cycles <n>       repeat the whole sweep n times, 0 = forever (1)\n"
      "  -p,--parallel_init <0/1>  each thread initialises its own ranks (0: the main thread, one group)\n"
      "  -c,--check <n>            data-checking iterations, 0 = off (1)\n"
      "  -o,--op <op>              sum/prod/max/min/avg/mulsum/all, comma lists allowed; all leaves out\n"
      "                            fp8 avg and mulsum, which NCCL does not have (sum)\n"
      "  -d,--datatype <type>      int8/uint8/int32/uint32/int64/uint64/half/float/double/bfloat16/\n"
      "                            f8e4m3/f8e5m2/all, comma lists allowed (float)\n"
      "  -r,--root <n|all>         root of rooted collectives; all (or -1) = every rank in turn (0)\n"
      "  -z,--blocking <0..3>      0: no extra syncs; 1: sync+barrier after every operation;\n"
      "                            2: sync after every operation; 3: sync+barrier after every\n"
      "                            iteration (a -m group). 1 and 2 do not aggregate (-m) in groups (0)\n"
      "  -y,--stream_null <0/1>    use the NULL stream (0)\n"
      "  -T,--timeout <s>          abort all communicators when an operation takes longer (off)\n"
      "  -C,--report_cputime <0/1> report host (enqueue) time instead of completion time (0)\n"
      "  -a,--average <0..3>       time across ranks: 0 rank 0, 1 average, 2 min, 3 max (1)\n"
      "  -R,--local_register <n>   1: ncclCommRegister buffers; 2: ncclCommWindowRegister (0)\n"
      "  -x,--cta_policy <0..2>    ncclConfig_t.CTAPolicy (unset)\n"
      "  -u,--unalign <n>          misalign buffers by n elements (0)\n"
      "  -J,--output_file <file>   also write the results as JSON\n"
      "  -G,--cudagraph <0>        CUDA graphs are not supported (only 0)\n"
      "     --host                 host buffers even when a GPU is present\n"
      "     --malloc               malloc/cudaMalloc buffers instead of ncclMemAlloc\n"
      "     --in_place <0/1>       0: run only the out-of-place half (in-place columns N/A) (1)\n"
      "  -h,--help                 this text\n"
      "Ranks: under theseus-run (THESEUS_RANK/THESEUS_NRANKS + NCCL_COMM_ID), under mpirun when built\n"
      "with MPI, else one process. Exit codes: 0 ok, 1 wrong results, 2 error, 3 usage, 4 timeout.\n",
      program);
}

}  // namespace theseus::perf
