#include "comm/failure_reports.h"

#include <string>

#include "comm/communicator.h"
#include "common/log.h"

namespace theseus::comm {
// Payload: "<code> <origin rank> <message>".
std::string encodeFailureReport(int rank, const Status& s) {
  return std::to_string(static_cast<int>(s.code())) + " " + std::to_string(rank) + " " + s.message();
}

bool decodeFailureReport(std::string_view p, int* code, int* rank, std::string* message) {
  size_t a = p.find(' ');
  size_t b = a == std::string_view::npos ? a : p.find(' ', a + 1);
  if (b == std::string_view::npos) return false;
  try {
    *code = std::stoi(std::string(p.substr(0, a)));
    *rank = std::stoi(std::string(p.substr(a + 1, b - a - 1)));
  } catch (...) {
    return false;
  }
  if (*code <= static_cast<int>(ncclSuccess) || *code >= static_cast<int>(ncclNumResults)) return false;
  *message = std::string(p.substr(b + 1));
  return true;
}

FailureReports::FailureReports(Communicator& comm) : comm_(comm), shared_(std::make_shared<Shared>()) {
  shared_->comm = &comm;
}

FailureReports::~FailureReports() { stop(); }

void FailureReports::apply(Shared& s, int from, const std::string& message, ncclResult_t code) {
  std::lock_guard lock(s.mu);
  if (s.comm == nullptr || from == s.comm->rank()) return;
  TH_INFO(log::kInit | log::kColl, "rank %d: rank %d reported a failed operation: %s", s.comm->rank(), from,
          message.c_str());
  s.comm->setAsyncError(code, "rank " + std::to_string(from) + " reported: " + message);
}

void FailureReports::start() {
  bootstrap::Bootstrap* boot = comm_.bootstrap();
  if (boot == nullptr || started_) return;
  started_ = true;
  std::weak_ptr<Shared> weak = shared_;
  const int me = comm_.rank();
  const int n = comm_.nranks();
  boot->setHandler(bootstrap::MsgType::kOpFailure, [weak, boot, me, n](int from, std::string_view payload) {
    auto s = weak.lock();
    if (!s) return;
    int code = 0, origin = -1;
    std::string message;
    if (!decodeFailureReport(payload, &code, &origin, &message) || origin < 0 || origin >= n) {
      TH_INFO(log::kInit, "rank %d: dropped a malformed failure report from rank %d", me, from);
      return;
    }
    if (me == 0) {  // the leader relays to everyone else
      for (int r = 1; r < n; ++r)
        if (r != origin) (void)boot->sendToRank(r, bootstrap::MsgType::kOpFailure, payload);
    }
    apply(*s, origin, message, static_cast<ncclResult_t>(code));
  });
}

void FailureReports::stop() {
  if (started_ && comm_.bootstrap() != nullptr) comm_.bootstrap()->setHandler(bootstrap::MsgType::kOpFailure, nullptr);
  std::lock_guard lock(shared_->mu);
  shared_->comm = nullptr;
}

void FailureReports::report(const Status& why) {
  bootstrap::Bootstrap* boot = comm_.bootstrap();
  if (why.isOk() || boot == nullptr || !started_ || comm_.abortFlag().isSet() || comm_.nranks() < 2) return;
  std::call_once(reported_, [&] {
    const std::string payload = encodeFailureReport(comm_.rank(), why);
    Status s = comm_.rank() == 0 ? Status::ok() : boot->sendToLeader(bootstrap::MsgType::kOpFailure, payload);
    if (comm_.rank() == 0)
      for (int r = 1; r < comm_.nranks(); ++r) (void)boot->sendToRank(r, bootstrap::MsgType::kOpFailure, payload);
    if (!s.isOk())
      TH_INFO(log::kInit, "rank %d: the failure could not be reported: %s", comm_.rank(), s.message().c_str());
  });
}

}  // namespace theseus::comm
