// Command-line parsing of the *_perf binaries: every nccl-tests flag, long
// forms, size suffixes, defaults, and clear errors for bad input.
#include <gtest/gtest.h>

#include <vector>

#include "perf_options.h"

namespace theseus::perf {
namespace {

Status parse(std::vector<const char*> args, Options* o) {
  args.insert(args.begin(), "all_reduce_perf");
  return parseOptions(static_cast<int>(args.size()), args.data(), o);
}

TEST(PerfOptions, DefaultsAreNcclTests) {
  Options o;
  ASSERT_TRUE(parse({}, &o).isOk());
  EXPECT_EQ(o.nThreads, 1);
  EXPECT_EQ(o.nGpus, 1);
  EXPECT_EQ(o.minBytes, 32u << 20);
  EXPECT_EQ(o.maxBytes, 32u << 20);
  EXPECT_EQ(o.stepBytes, 1u << 20);
  EXPECT_EQ(o.stepFactor, 1u);
  EXPECT_EQ(o.iters, 20);
  EXPECT_EQ(o.warmupIters, 1);
  EXPECT_EQ(o.aggIters, 1);
  EXPECT_EQ(o.check, 1);
  EXPECT_EQ(o.average, 1);
  EXPECT_EQ(o.root, 0);
  ASSERT_EQ(o.types.size(), 1u);
  EXPECT_EQ(o.types[0], ncclFloat32);
  ASSERT_EQ(o.ops.size(), 1u);
  EXPECT_EQ(o.ops[0], OpKind::kSum);
}

TEST(PerfOptions, EveryShortFlag) {
  Options o;
  Status s = parse({"-t", "2", "-g", "3", "-b", "8", "-e", "128M", "-i", "4K", "-f", "2", "-n", "5", "-w", "0",
                    "-m", "4", "-N", "2", "-p", "1", "-c", "3", "-o", "prod", "-d", "bfloat16", "-r", "1", "-z", "2",
                    "-y", "1", "-T", "1.5", "-C", "1", "-a", "3", "-R", "2", "-x", "1", "-u", "7", "-J", "out.json",
                    "-G", "0"},
                   &o);
  ASSERT_TRUE(s.isOk()) << s.message();
  EXPECT_EQ(o.nThreads, 2);
  EXPECT_EQ(o.nGpus, 3);
  EXPECT_EQ(o.minBytes, 8u);
  EXPECT_EQ(o.maxBytes, 128u << 20);
  EXPECT_EQ(o.stepBytes, 4096u);
  EXPECT_EQ(o.stepFactor, 2u);
  EXPECT_EQ(o.iters, 5);
  EXPECT_EQ(o.warmupIters, 0);
  EXPECT_EQ(o.aggIters, 4);
  EXPECT_EQ(o.runCycles, 2);
  EXPECT_TRUE(o.parallelInit);
  EXPECT_EQ(o.check, 3);
  EXPECT_EQ(o.ops, std::vector<OpKind>{OpKind::kProd});
  EXPECT_EQ(o.types, std::vector<ncclDataType_t>{ncclBfloat16});
  EXPECT_EQ(o.root, 1);
  EXPECT_EQ(o.blocking, 2);
  EXPECT_TRUE(o.streamNull);
  EXPECT_DOUBLE_EQ(o.timeoutSec, 1.5);
  EXPECT_TRUE(o.reportCpuTime);
  EXPECT_EQ(o.average, 3);
  EXPECT_EQ(o.localRegister, 2);
  EXPECT_EQ(o.ctaPolicy, 1);
  EXPECT_EQ(o.unalign, 7u);
  EXPECT_EQ(o.jsonPath, "out.json");
}

TEST(PerfOptions, LongFormsInlineValuesAndOurFlags) {
  Options o;
  Status s = parse({"--minbytes=1K", "--maxbytes", "1G", "--stepfactor=4", "--op", "all", "--datatype=all",
                    "--root", "all", "--check=0", "--host", "--malloc", "--in_place", "0", "-b2K"},
                   &o);
  ASSERT_TRUE(s.isOk()) << s.message();
  EXPECT_EQ(o.minBytes, 2048u);  // the later -b2K wins
  EXPECT_EQ(o.maxBytes, 1u << 30);
  EXPECT_EQ(o.stepFactor, 4u);
  EXPECT_EQ(o.ops.size(), 6u);
  EXPECT_TRUE(o.opsAll);
  EXPECT_EQ(o.types.size(), 12u);
  EXPECT_EQ(o.root, -1);
  EXPECT_EQ(o.check, 0);
  EXPECT_EQ(o.memory, MemoryMode::kHost);
  EXPECT_TRUE(o.useMalloc);
  EXPECT_FALSE(o.inPlace);
  Options d;
  ASSERT_TRUE(parse({"--in_place=1"}, &d).isOk());
  EXPECT_TRUE(d.inPlace);
  EXPECT_TRUE(Options{}.inPlace);  // both halves by default, as nccl-tests
}

TEST(PerfOptions, TypeAndOpListsAndAliases) {
  Options o;
  ASSERT_TRUE(parse({"-d", "int8,uint64,half,f8e4m3,fp16,bf16", "-o", "min,max,mulsum,avg"}, &o).isOk());
  EXPECT_EQ(o.types, (std::vector<ncclDataType_t>{ncclInt8, ncclUint64, ncclFloat16, ncclFloat8e4m3, ncclFloat16,
                                                  ncclBfloat16}));
  EXPECT_EQ(o.ops, (std::vector<OpKind>{OpKind::kMin, OpKind::kMax, OpKind::kMulSum, OpKind::kAvg}));
}

TEST(PerfOptions, SizeSuffixes) {
  size_t v = 0;
  ASSERT_TRUE(parseSize("0", &v).isOk());
  EXPECT_EQ(v, 0u);
  ASSERT_TRUE(parseSize("17", &v).isOk());
  EXPECT_EQ(v, 17u);
  ASSERT_TRUE(parseSize("3k", &v).isOk());
  EXPECT_EQ(v, 3u << 10);
  ASSERT_TRUE(parseSize("5M", &v).isOk());
  EXPECT_EQ(v, 5u << 20);
  ASSERT_TRUE(parseSize("2G", &v).isOk());
  EXPECT_EQ(v, size_t{2} << 30);
  EXPECT_FALSE(parseSize("", &v).isOk());
  EXPECT_FALSE(parseSize("M", &v).isOk());
  EXPECT_FALSE(parseSize("-5", &v).isOk());
  EXPECT_FALSE(parseSize("12X", &v).isOk());
  EXPECT_FALSE(parseSize("12MB", &v).isOk());
  EXPECT_FALSE(parseSize("99999999999999999999G", &v).isOk());
}

TEST(PerfOptions, BadInputIsAClearUsageError) {
  struct Case {
    std::vector<const char*> args;
    const char* expect;
  };
  const std::vector<Case> cases = {
      {{"-q"}, "unknown option '-q'"},
      {{"--frobnicate"}, "unknown option '--frobnicate'"},
      {{"-n"}, "-n needs a value"},
      {{"-n", "abc"}, "'abc' is not an integer"},
      {{"-z", "4"}, "out of range"},
      {{"-d", "float128"}, "unknown datatype 'float128'"},
      {{"-o", "xor"}, "unknown operation 'xor'"},
      {{"-b", "1M", "-e", "1K"}, "minbytes (1048576) > maxbytes (1024)"},
      {{"-b", "0", "-e", "1K", "-f", "2"}, "needs -b > 0"},
      {{"-b", "1", "-e", "1K", "-i", "0"}, "-i 0 never reaches maxbytes"},
      {{"-G", "2"}, "CUDA graph capture is not supported"},
      {{"-T", "soon"}, "not a number of seconds"},
      {{"--host=1"}, "takes no value"},
      {{"--in_place", "2"}, "out of range"},
      {{"--in_place"}, "--in_place needs a value"},
      {{"stray"}, "unexpected argument 'stray'"},
  };
  for (const Case& c : cases) {
    Options o;
    Status s = parse(c.args, &o);
    ASSERT_FALSE(s.isOk()) << c.expect;
    EXPECT_EQ(s.exitCode(), kExitUsage);
    EXPECT_NE(s.message().find(c.expect), std::string::npos) << "got: " << s.message();
  }
}

TEST(PerfOptions, HelpSkipsValidationAndUsageMentionsEveryFlag) {
  Options o;
  ASSERT_TRUE(parse({"-b", "1M", "-e", "1K", "-h"}, &o).isOk());
  EXPECT_TRUE(o.help);
  std::string u = usageText("x_perf");
  for (const char* f : {"-t,", "-g,", "-b,", "-e,", "-i,", "-f,", "-n,", "-w,", "-m,", "-N,", "-c,", "-o,", "-d,",
                        "-r,", "-z,", "-a,", "-p,", "-T,", "-C,", "-R,", "-u,", "-J,", "--host", "--malloc", "--in_place"})
    EXPECT_NE(u.find(f), std::string::npos) << f;
}

TEST(PerfOptions, SweepSizes) {
  Options o;
  o.minBytes = 8;
  o.maxBytes = 100;
  o.stepFactor = 2;
  EXPECT_EQ(sweepSizes(o), (std::vector<size_t>{8, 16, 32, 64}));
  o.stepFactor = 1;
  o.stepBytes = 40;
  EXPECT_EQ(sweepSizes(o), (std::vector<size_t>{8, 48, 88}));
  o.minBytes = o.maxBytes = 64;
  o.stepBytes = 0;
  EXPECT_EQ(sweepSizes(o), (std::vector<size_t>{64}));
  o.minBytes = 0;
  o.maxBytes = 0;
  EXPECT_EQ(sweepSizes(o), (std::vector<size_t>{0}));
  o.minBytes = SIZE_MAX / 2 + 1;  // the factor would overflow
  o.maxBytes = SIZE_MAX;
  o.stepFactor = 2;
  EXPECT_EQ(sweepSizes(o).size(), 1u);
}

}  // namespace
}  // namespace theseus::perf
