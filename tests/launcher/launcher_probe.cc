// The rank program the launcher tests run under theseus-run. Its first
// argument picks a behaviour; every mode reads its rank from RANK.
//   env                   print the launcher's variables as KEY=VALUE
//   exit R CODE           rank R exits CODE at once, the others exit 0
//   fail R CODE DIR       rank R exits CODE after 0.3 s; the others write
//                         DIR/pid.<rank> and sleep 60 s
//   crash R DIR           rank R dies of SIGSEGV; the others sleep (pid files)
//   sleep SEC DIR         write DIR/pid.<rank>, sleep SEC
//   ignore-term DIR       ignore SIGTERM, write the pid file, sleep 60 s
//   signals               print "ready", then on SIGTERM/SIGINT print
//                         "rank R got signal N" and exit 0
//   lines                 stdout/stderr lines in odd chunks, a partial last line
//   grandchild R DIR      fork a sleeping grandchild (pid in DIR/grandchild),
//                         then rank R exits 5 and the others sleep
//   tcp                   rank 0 accepts WORLD_SIZE-1 connections on the
//                         NCCL_COMM_ID address; the others connect and say hello
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

namespace {

int rank() { return atoi(getenv("RANK") ? getenv("RANK") : "-1"); }

void writePid(const std::string& dir, const std::string& name) {
  FILE* f = fopen((dir + "/" + name).c_str(), "w");
  if (f) {
    fprintf(f, "%d\n", static_cast<int>(getpid()));
    fclose(f);
  }
}

void sleepSec(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

volatile sig_atomic_t gotSignal = 0;
void onSignal(int s) { gotSignal = s; }

int tcp() {
  std::string id = getenv("NCCL_COMM_ID");
  std::string host = id.substr(0, id.rfind(':'));
  int port = atoi(id.substr(id.rfind(':') + 1).c_str());
  int world = atoi(getenv("WORLD_SIZE"));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, host.c_str(), &addr.sin_addr);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (rank() == 0) {
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(fd, 64) != 0) {
      perror("bind/listen");
      return 2;
    }
    for (int i = 1; i < world; ++i) {
      sockaddr_in peer{};
      socklen_t len = sizeof(peer);
      int c = accept(fd, reinterpret_cast<sockaddr*>(&peer), &len);
      char buf[64] = {0};
      ssize_t n = read(c, buf, sizeof(buf) - 1);
      char ip[64];
      inet_ntop(AF_INET, &peer.sin_addr, ip, sizeof(ip));
      printf("rank 0 got '%.*s' from %s\n", static_cast<int>(n > 0 ? n : 0), buf, ip);
      close(c);
    }
    return 0;
  }
  for (int attempt = 0; attempt < 100; ++attempt) {
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
      std::string msg = "hello from " + std::to_string(rank());
      if (write(fd, msg.data(), msg.size()) < 0) return 3;
      printf("rank %d connected to %s\n", rank(), id.c_str());
      return 0;
    }
    close(fd);
    fd = socket(AF_INET, SOCK_STREAM, 0);
    sleepSec(0.05);
  }
  perror("connect");
  return 4;
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "";
  auto arg = [&](int i) { return std::string(argc > i ? argv[i] : ""); };
  if (mode == "env") {
    for (const char* k : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
                          "MASTER_PORT", "THESEUS_RANK", "THESEUS_NRANKS", "THESEUS_LOCAL_RANK", "THESEUS_LOCAL_SIZE",
                          "THESEUS_HOST", "NCCL_COMM_ID", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                          "OMPI_COMM_WORLD_LOCAL_RANK", "PROBE_EXTRA"}) {
      const char* v = getenv(k);
      printf("%s=%s\n", k, v ? v : "<unset>");
    }
    return 0;
  }
  if (mode == "exit") return rank() == atoi(argv[2]) ? atoi(argv[3]) : 0;
  if (mode == "fail") {
    if (rank() == atoi(argv[2])) {
      sleepSec(0.3);
      return atoi(argv[3]);
    }
    writePid(arg(4), "pid." + std::to_string(rank()));
    sleepSec(60);
    return 0;
  }
  if (mode == "crash") {
    if (rank() == atoi(argv[2])) {
      sleepSec(0.2);
      signal(SIGSEGV, SIG_DFL);  // die of the signal even where a sanitizer installed its own handler
      raise(SIGSEGV);
    }
    writePid(arg(3), "pid." + std::to_string(rank()));
    sleepSec(60);
    return 0;
  }
  if (mode == "sleep") {
    writePid(arg(3), "pid." + std::to_string(rank()));
    sleepSec(atof(argv[2]));
    return 0;
  }
  if (mode == "ignore-term") {
    signal(SIGTERM, SIG_IGN);
    writePid(arg(2), "pid." + std::to_string(rank()));
    sleepSec(60);
    return 0;
  }
  if (mode == "signals") {
    signal(SIGTERM, onSignal);
    signal(SIGINT, onSignal);
    printf("rank %d ready\n", rank());
    fflush(stdout);
    for (int i = 0; i < 600 && !gotSignal; ++i) sleepSec(0.1);
    printf("rank %d got signal %d\n", rank(), static_cast<int>(gotSignal));
    return gotSignal ? 0 : 1;
  }
  if (mode == "lines") {
    const int r = rank();
    std::string big;
    for (int i = 0; i < 50; ++i) big += "rank " + std::to_string(r) + " line " + std::to_string(i) + "\n";
    for (size_t off = 0; off < big.size(); off += 7) {  // odd chunk sizes split lines
      fwrite(big.data() + off, 1, std::min<size_t>(7, big.size() - off), stdout);
      fflush(stdout);
    }
    fprintf(stderr, "rank %d error line\n", r);
    printf("rank %d partial", r);
    return 0;
  }
  if (mode == "grandchild") {
    if (fork() == 0) {
      writePid(arg(3), "grandchild." + std::to_string(rank()));
      sleepSec(60);
      _exit(0);
    }
    sleepSec(0.3);
    if (rank() == atoi(argv[2])) return 5;
    sleepSec(60);
    return 0;
  }
  if (mode == "tcp") return tcp();
  fprintf(stderr, "launcher_probe: unknown mode '%s'\n", mode.c_str());
  return 99;
}
