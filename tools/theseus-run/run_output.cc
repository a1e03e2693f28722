#include "run_output.h"

#include <unistd.h>

#include <cerrno>
#include <utility>

namespace theseus::run {

void writeAll(int fd, const std::string& data) {
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = write(fd, data.data() + off, data.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    off += static_cast<size_t>(n);
  }
}

LineForwarder::~LineForwarder() { closeNow(); }

LineForwarder::LineForwarder(LineForwarder&& o) noexcept
    : fd_(std::exchange(o.fd_, -1)), rank_(o.rank_), dest_(o.dest_), partial_(std::move(o.partial_)) {}

void LineForwarder::emit(const std::string& line) {
  writeAll(dest_, "[" + std::to_string(rank_) + "] " + line + "\n");
}

void LineForwarder::pump() {
  if (fd_ < 0) return;
  char buf[65536];
  ssize_t n = read(fd_, buf, sizeof(buf));
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
  if (n <= 0) {
    closeNow();
    return;
  }
  partial_.append(buf, static_cast<size_t>(n));
  size_t start = 0, nl;
  while ((nl = partial_.find('\n', start)) != std::string::npos) {
    emit(partial_.substr(start, nl - start));
    start = nl + 1;
  }
  partial_.erase(0, start);
}

void LineForwarder::closeNow() {
  if (fd_ < 0) return;
  if (!partial_.empty()) emit(partial_);
  partial_.clear();
  close(fd_);
  fd_ = -1;
}

}  // namespace theseus::run
