// Forwarding of one rank's stdout or stderr pipe to ours, one whole line at a
// time, each prefixed with "[rank] " (--tag-output). A line is written with a
// single write(2), so lines of different ranks never interleave mid-line.
#pragma once

#include <string>

namespace theseus::run {

class LineForwarder {
 public:
  LineForwarder(int fd, int rank, int destFd) : fd_(fd), rank_(rank), dest_(destFd) {}
  ~LineForwarder();
  LineForwarder(LineForwarder&& o) noexcept;
  LineForwarder(const LineForwarder&) = delete;
  LineForwarder& operator=(const LineForwarder&) = delete;
  LineForwarder& operator=(LineForwarder&&) = delete;

  int fd() const { return fd_; }
  bool open() const { return fd_ >= 0; }
  // Reads what is available and forwards complete lines; at EOF forwards the
  // last partial line (with a newline added) and closes the pipe.
  void pump();
  void closeNow();

 private:
  void emit(const std::string& line);

  int fd_;
  int rank_;
  int dest_;
  std::string partial_;
};

// write(2) all of `data`, retrying on EINTR/short writes; errors are ignored
// (a closed terminal must not kill the launcher).
void writeAll(int fd, const std::string& data);

}  // namespace theseus::run
