// Collectives and point-to-point operations: check, then queue in the
// current (or an implicit) group.
#include "api/guard.h"
#include "comm/group.h"
#include "comm/validate.h"

namespace comm = theseus::comm;
using theseus::schedule::Collective;

namespace {

ncclResult_t submit(const char* function, ncclComm_t handle, const comm::OpDesc& op) {
  return theseus::api::guard(function, [&]() -> theseus::Status {
    comm::Communicator* c;
    TH_CHECK(comm::validateOp(handle, op, &c));
    return comm::enqueueOp(c, op);
  });
}

comm::OpDesc collective(Collective kind, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t type,
                        ncclRedOp_t op, int root, cudaStream_t stream) {
  comm::OpDesc d;
  d.kind = comm::OpDesc::Kind::kCollective;
  d.collective = kind;
  d.sendbuff = sendbuff;
  d.recvbuff = recvbuff;
  d.count = count;
  d.type = type;
  d.op = op;
  d.root = root;
  d.stream = stream;
  return d;
}

}  // namespace

NCCL_API(ncclResult_t, ncclAllReduce, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
         ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return submit(__func__, comm, collective(Collective::kAllReduce, sendbuff, recvbuff, count, datatype, op, 0, stream));
}

NCCL_API(ncclResult_t, ncclBroadcast, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
         int root, ncclComm_t comm, cudaStream_t stream) {
  return submit(__func__, comm,
                collective(Collective::kBroadcast, sendbuff, recvbuff, count, datatype, ncclSum, root, stream));
}

NCCL_API(ncclResult_t, ncclBcast, void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
         cudaStream_t stream) {
  return submit(__func__, comm, collective(Collective::kBroadcast, buff, buff, count, datatype, ncclSum, root, stream));
}

NCCL_API(ncclResult_t, ncclReduce, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
         ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  return submit(__func__, comm, collective(Collective::kReduce, sendbuff, recvbuff, count, datatype, op, root, stream));
}

NCCL_API(ncclResult_t, ncclAllGather, const void* sendbuff, void* recvbuff, size_t sendcount,
         ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  return submit(__func__, comm,
                collective(Collective::kAllGather, sendbuff, recvbuff, sendcount, datatype, ncclSum, 0, stream));
}

NCCL_API(ncclResult_t, ncclReduceScatter, const void* sendbuff, void* recvbuff, size_t recvcount,
         ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return submit(__func__, comm,
                collective(Collective::kReduceScatter, sendbuff, recvbuff, recvcount, datatype, op, 0, stream));
}

NCCL_API(ncclResult_t, ncclAlltoAll, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
         ncclComm_t comm, cudaStream_t stream) {
  return submit(__func__, comm,
                collective(Collective::kAlltoAll, sendbuff, recvbuff, count, datatype, ncclSum, 0, stream));
}

NCCL_API(ncclResult_t, ncclGather, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
         int root, ncclComm_t comm, cudaStream_t stream) {
  return submit(__func__, comm,
                collective(Collective::kGather, sendbuff, recvbuff, count, datatype, ncclSum, root, stream));
}

NCCL_API(ncclResult_t, ncclScatter, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
         int root, ncclComm_t comm, cudaStream_t stream) {
  return submit(__func__, comm,
                collective(Collective::kScatter, sendbuff, recvbuff, count, datatype, ncclSum, root, stream));
}

NCCL_API(ncclResult_t, ncclSend, const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
         ncclComm_t comm, cudaStream_t stream) {
  comm::OpDesc d;
  d.kind = comm::OpDesc::Kind::kSend;
  d.sendbuff = sendbuff;
  d.count = count;
  d.type = datatype;
  d.peer = peer;
  d.stream = stream;
  return submit(__func__, comm, d);
}

NCCL_API(ncclResult_t, ncclRecv, void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
         cudaStream_t stream) {
  comm::OpDesc d;
  d.kind = comm::OpDesc::Kind::kRecv;
  d.recvbuff = recvbuff;
  d.count = count;
  d.type = datatype;
  d.peer = peer;
  d.stream = stream;
  return submit(__func__, comm, d);
}

NCCL_API(ncclResult_t, ncclGroupStart) {
  return TH_API_GUARD({ return comm::groupStart(); });
}

NCCL_API(ncclResult_t, ncclGroupEnd) {
  return TH_API_GUARD({ return comm::groupEnd(); });
}

NCCL_API(ncclResult_t, ncclGroupSimulateEnd, ncclSimInfo_t* simInfo) {
  return TH_API_GUARD({ return comm::groupSimulateEnd(simInfo); });
}
