#include "common/proc_stat.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace theseus {

bool readProcStat(int pid, char* state, uint64_t* startTime) {
  char path[64], buf[1024];
  snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  FILE* f = fopen(path, "re");
  if (f == nullptr) return false;
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = '\0';
  // "pid (comm) S ppid ...": comm may hold spaces or ')', so parse after the last ')'.
  const char* p = strrchr(buf, ')');
  if (p == nullptr || p[1] != ' ') return false;
  *state = p[2];
  // Field 22 (starttime) is the 20th field after the state.
  const char* q = p + 2;
  for (int field = 3; field < 22 && q != nullptr; ++field) {
    q = strchr(q, ' ');
    if (q != nullptr) ++q;
  }
  *startTime = q != nullptr ? strtoull(q, nullptr, 10) : 0;
  return true;
}

}  // namespace theseus
