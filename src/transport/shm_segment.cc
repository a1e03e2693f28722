#include "transport/shm_segment.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/log.h"
#include "device/host_registry.h"

namespace theseus::transport {

size_t pageSize() {
  static const size_t kPage = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return kPage;
}

size_t roundUpToPage(size_t bytes) {
  size_t p = pageSize();
  return (bytes + p - 1) / p * p;
}

ShmSegment::~ShmSegment() {
  if (base_ != nullptr) {
    device::releaseHostRange(base_, size_);  // an executor may have registered part of it for the GPU
    munmap(base_, size_);
  }
  if (fd_ >= 0) close(fd_);
  unlinkName();
}

Status ShmSegment::mapFd(size_t bytes, bool readOnly) {
  int prot = readOnly ? PROT_READ : PROT_READ | PROT_WRITE;
  void* p = mmap(nullptr, bytes, prot, MAP_SHARED, fd_, 0);
  if (p == MAP_FAILED) return errnoStatus(errno, "mmap of %zu bytes of shared memory %s", bytes, locator_.c_str());
  base_ = static_cast<char*>(p);
  size_ = bytes;
  return Status::ok();
}

int ShmSegment::removeStaleNamed(const std::string& prefix) {
  int removed = 0;
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return 0;
  while (dirent* e = readdir(dir)) {
    const std::string name = e->d_name;
    const size_t p = name.rfind("-p");
    if (name.rfind(prefix, 0) != 0 || p == std::string::npos || p + 2 >= name.size()) continue;
    char* end = nullptr;
    const long pid = strtol(name.c_str() + p + 2, &end, 10);
    if (end == nullptr || *end != '\0' || pid <= 0) continue;
    // A pid that exists (even another program's, after reuse) keeps its segments: only a
    // creator that is certainly gone frees them.
    if (kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
    if (shm_unlink(("/" + name).c_str()) == 0) {
      ++removed;
      TH_INFO(log::kShm | log::kInit, "Removed /dev/shm/%s, left by process %ld, which no longer exists", name.c_str(),
              pid);
    }
  }
  closedir(dir);
  return removed;
}

Result<std::unique_ptr<ShmSegment>> ShmSegment::createNamed(const std::string& name, size_t bytes) {
  std::unique_ptr<ShmSegment> s(new ShmSegment());
  std::string path = "/" + name + "-p" + std::to_string(getpid());
  bytes = roundUpToPage(bytes);
  int fd = shm_open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0 && errno == EEXIST) {
    // Left behind by a run that crashed between creating and unlinking it: the
    // name includes the communicator hash and rank, so nobody live owns it.
    TH_INFO(log::kShm, "Replacing stale shared-memory segment /dev/shm%s", path.c_str());
    shm_unlink(path.c_str());
    fd = shm_open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  }
  if (fd < 0) return errnoStatus(errno, "shm_open(%s)", path.c_str());
  s->fd_ = fd;
  s->shmName_ = path;
  s->locator_ = "shm:" + path;
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0)
    return errnoStatus(errno, "ftruncate of shared-memory segment %s to %zu bytes", path.c_str(), bytes);
  TH_CHECK(s->mapFd(bytes, false));
  return s;
}

Result<std::unique_ptr<ShmSegment>> ShmSegment::createMemfd(const std::string& name, size_t bytes) {
  std::unique_ptr<ShmSegment> s(new ShmSegment());
  bytes = roundUpToPage(bytes);
  int fd = memfd_create(name.c_str(), MFD_CLOEXEC);
  if (fd < 0) return errnoStatus(errno, "memfd_create(%s)", name.c_str());
  s->fd_ = fd;
  s->locator_ = "fd:" + std::to_string(getpid()) + ":" + std::to_string(fd) + ":" + name;
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0)
    return errnoStatus(errno, "ftruncate of memfd %s to %zu bytes", name.c_str(), bytes);
  TH_CHECK(s->mapFd(bytes, false));
  return s;
}

namespace {

struct MemfdLocator {
  int pid = 0;
  int fd = -1;
  std::string name;
  std::string link;  // /proc/<pid>/fd/<fd>
};

bool parseMemfdLocator(const std::string& locator, MemfdLocator* out) {
  int consumed = 0;
  if (sscanf(locator.c_str(), "fd:%d:%d:%n", &out->pid, &out->fd, &consumed) != 2 || consumed == 0 || out->pid <= 0 ||
      out->fd < 0)
    return false;
  out->name = locator.substr(static_cast<size_t>(consumed));
  out->link = "/proc/" + std::to_string(out->pid) + "/fd/" + std::to_string(out->fd);
  return true;
}

// What /proc/<pid>/fd/<fd> points to ("" when it cannot be read).
std::string linkTarget(const std::string& link) {
  char target[512];
  ssize_t n = readlink(link.c_str(), target, sizeof(target) - 1);
  if (n < 0) return "";
  return std::string(target, static_cast<size_t>(n));
}

// Opens "fd:<pid>:<fd>:<name>" through /proc and checks the file is that memfd.
Result<int> openMemfdLocator(const std::string& locator, bool readOnly) {
  MemfdLocator l;
  if (!parseMemfdLocator(locator, &l)) return invalidArgument("malformed shared-memory locator '%s'", locator.c_str());
  int pid = l.pid, fd = l.fd;
  const std::string& name = l.name;
  const std::string& link = l.link;
  std::string target = linkTarget(link);
  if (target.empty()) return errnoStatus(errno, "cannot see process %d's shared memory (%s)", pid, link.c_str());
  std::string expect = "/memfd:" + name + " (deleted)";
  if (expect != target)
    return remoteError("process %d's descriptor %d is '%s', not the shared memory '%s' (freed?)", pid, fd,
                       target.c_str(), name.c_str());
  int f = ::open(link.c_str(), (readOnly ? O_RDONLY : O_RDWR) | O_CLOEXEC);
  if (f < 0) return errnoStatus(errno, "open(%s) for process %d's shared memory", link.c_str(), pid);
  return f;
}

}  // namespace

bool ShmSegment::ownerStillHas(const std::string& locator) {
  MemfdLocator l;
  if (!parseMemfdLocator(locator, &l)) return true;
  return linkTarget(l.link) == "/memfd:" + l.name + " (deleted)";
}

Result<std::unique_ptr<ShmSegment>> ShmSegment::open(const std::string& locator, size_t minBytes, bool readOnly) {
  std::unique_ptr<ShmSegment> s(new ShmSegment());
  s->locator_ = locator;
  if (locator.rfind("shm:/", 0) == 0) {
    std::string path = locator.substr(4);
    int fd = shm_open(path.c_str(), (readOnly ? O_RDONLY : O_RDWR) | O_CLOEXEC, 0);
    if (fd < 0) return errnoStatus(errno, "shm_open(%s) of a peer's segment", path.c_str());
    s->fd_ = fd;
  } else if (locator.rfind("fd:", 0) == 0) {
    TH_ASSIGN(s->fd_, openMemfdLocator(locator, readOnly));
  } else {
    return invalidArgument("unknown shared-memory locator '%s'", locator.c_str());
  }
  struct stat st;
  if (fstat(s->fd_, &st) != 0) return errnoStatus(errno, "fstat of shared memory %s", locator.c_str());
  size_t bytes = static_cast<size_t>(st.st_size);
  if (bytes < minBytes || bytes == 0)
    return remoteError("shared memory %s has %zu bytes, expected at least %zu", locator.c_str(), bytes, minBytes);
  TH_CHECK(s->mapFd(bytes, readOnly));
  return s;
}

Status ShmSegment::reserve(size_t offset, size_t bytes) {
  if (bytes == 0) return Status::ok();
  int rc = posix_fallocate(fd_, static_cast<off_t>(offset), static_cast<off_t>(bytes));
  if (rc == 0) return Status::ok();
  if (rc == ENOSPC || rc == ENOMEM)
    return errnoStatus(rc,
                       "cannot allocate %zu bytes of shared memory (%s): /dev/shm or memory is full; give the "
                       "container more shared memory (docker --shm-size), use fewer channels/smaller "
                       "THESEUS_SHM_SLOT_BYTES, or set NCCL_SHM_DISABLE=1",
                       bytes, locator_.c_str());
  if (rc == EOPNOTSUPP || rc == EINVAL) return Status::ok();  // not a tmpfs: pages come on touch
  return errnoStatus(rc, "fallocate of %zu bytes of shared memory %s", bytes, locator_.c_str());
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

Status ShmSegment::populateRange(size_t offset, size_t bytes) {
  if (bytes == 0) return Status::ok();
  size_t begin = offset / pageSize() * pageSize();
  size_t end = roundUpToPage(offset + bytes);
  if (end > size_) return internalError("populateRange beyond the %zu-byte segment %s", size_, locator_.c_str());
  if (madvise(base_ + begin, end - begin, MADV_POPULATE_WRITE) == 0) return Status::ok();
  int e = errno;
  if (e == ENOMEM || e == EFAULT)
    return errnoStatus(e,
                       "cannot allocate %zu bytes of shared memory (%s): /dev/shm or memory is full; give the "
                       "container more shared memory (docker --shm-size), use fewer channels/smaller "
                       "THESEUS_SHM_SLOT_BYTES, or set NCCL_SHM_DISABLE=1",
                       end - begin, locator_.c_str());
  if (fd_ >= 0) return reserve(begin, end - begin);
  return Status::ok();  // an old kernel and no descriptor: pages come on first touch
}

void ShmSegment::closeFd() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

void ShmSegment::populate() {
  if (madvise(base_, size_, MADV_POPULATE_WRITE) == 0) return;
  // Older kernels: touch one byte per page (the memory is new, so zeros stay zeros).
  for (size_t off = 0; off < size_; off += pageSize())
    reinterpret_cast<volatile char*>(base_)[off] = 0;
}

void ShmSegment::unlinkName() {
  if (shmName_.empty()) return;
  shm_unlink(shmName_.c_str());
  shmName_.clear();
}

}  // namespace theseus::transport
