// Replays fuzz inputs without libFuzzer: every file under the directories (or
// the files) given on the command line goes once through the target's
// LLVMFuzzerTestOneInput, in name order. This is how the normal (gcc) build
// runs the corpora of tests/fuzz/corpus/ as regression tests (CTest label
// "fuzz"): an input that once crashed, leaked or hung a parser is in the corpus
// and must now get through cleanly. A crash is the test's failure; so is an
// empty corpus (a wrong path must not pass silently).
//
//   fuzz_replay_<target> DIR|FILE...
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <system_error>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" __attribute__((weak)) int LLVMFuzzerInitialize(int* argc, char*** argv);

namespace {

namespace fs = std::filesystem;

// The regular files of `arg` (itself when it is one), sorted; false when it does not exist.
bool collect(const std::string& arg, std::vector<std::string>* out) {
  std::error_code ec;
  if (fs::is_regular_file(arg, ec)) {
    out->push_back(arg);
    return true;
  }
  if (!fs::is_directory(arg, ec)) return false;
  std::vector<std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(arg, ec))
    if (e.is_regular_file(ec)) files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  out->insert(out->end(), files.begin(), files.end());
  return !ec;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s DIR|FILE...\n", argv[0]);
    return 2;
  }
  if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
  using Clock = std::chrono::steady_clock;
  double slowestMs = 0;
  std::string slowest;
  size_t total = 0;
  for (int i = 1; i < argc; ++i) {
    std::vector<std::string> files;
    if (!collect(argv[i], &files)) {
      fprintf(stderr, "%s: %s: no such file or directory\n", argv[0], argv[i]);
      return 1;
    }
    const auto start = Clock::now();
    for (const std::string& f : files) {
      std::ifstream in(f, std::ios::binary);
      std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      if (!in.good() && !in.eof()) {
        fprintf(stderr, "%s: cannot read %s\n", argv[0], f.c_str());
        return 1;
      }
      const auto t0 = Clock::now();
      LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
      const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      if (ms > slowestMs) {
        slowestMs = ms;
        slowest = f;
      }
    }
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    printf("%s: ran %zu inputs from %s in %.0f ms\n", argv[0], files.size(), argv[i], ms);
    total += files.size();
  }
  if (total == 0) {
    fprintf(stderr, "%s: no inputs found\n", argv[0]);
    return 1;
  }
  printf("%s: %zu inputs, all passed; slowest %.1f ms (%s)\n", argv[0], total, slowestMs, slowest.c_str());
  return 0;
}
