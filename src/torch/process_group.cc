#include "ringguard/torch/process_group.h"

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <set>
#include <sstream>
#include <tuple>
#include <utility>

#include "core/env.h"
#include "ringguard/torch/convert.h"
#if RINGGUARD_TORCH_MPI
#include "bootstrap/mpi_bootstrap.h"  // mpi::createGroupBootstrap over the group's own MPI ranks
#include "ringguard/mpi/mpi_communicator.h"
#endif
#include "ringguard/policy/process_engine.h"
#include "ringguard/runtime/device_stager.h"
#include "ringguard/runtime/factories.h"
#include "ringguard/runtime/staged_allgather.h"
#include "ringguard/runtime/staged_allreduce.h"
#include "runtime/peer_lanes.h"
#include "torch/completion.h"
#include "torch/store_bootstrap.h"
#include "torch/strided.h"
#include "transport/c10d/c10d_transport.h"
#if RINGGUARD_TORCH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include "ringguard/runtime/device_factory.h"
#endif

namespace ringguard {

namespace {

// Tag bases on the Gloo backend: one range per communicator (C10dTransport uses 3 tags from its base).
constexpr int kCpuTagBase = 1;
constexpr int kCudaTagBase = 8;
constexpr int kP2pTagBase = 16;  // send/recv's lanes (peer_lanes.h)

std::string describe(const at::Tensor& t) {
  std::ostringstream s;
  s << c10::toString(t.scalar_type()) << " tensor on " << t.device();
  return s.str();
}

[[noreturn]] void unsupported(const char* op, const std::string& what) {
  TORCH_CHECK(
      false, "ringguard: ", op, " is not supported (", what,
      "); supported: allreduce, broadcast, allgather, all_gather_into_tensor, reduce_scatter, "
      "reduce_scatter_tensor, all_to_all, all_to_all_single, reduce, gather, scatter, barrier, send, recv, "
      "all_gather_coalesced, recv without a source");
}

std::string firstTensor(const std::vector<at::Tensor>& t) {
  return t.empty() ? "no tensors" : describe(t[0]);
}

// The ringguard op of a reduction of `t` (dtype `dt`), or the error naming the collective, the op, the dtype
// and the device (toReduceOp, reduceSupported: include/ringguard/torch/convert.h, core/types.h).
ReduceOp reduceOpFor(const char* name, const c10d::ReduceOp& rop, const at::Tensor& t, DataType dt) {
  ReduceOp op = ReduceOp::kSum;
  std::string why;
  if (!toReduceOp(rop, &op, &why)) unsupported(name, why + " on " + describe(t));
  if (!reduceSupported(dt, op)) {
    unsupported(name,
                std::string(c10dReduceOpName(rop)) + " on " + describe(t) +
                    " (floats: SUM, AVG, PRODUCT, MIN, MAX, PREMUL_SUM; integers: those but PREMUL_SUM, and "
                    "BAND, BOR, BXOR; bool: SUM, PRODUCT, MIN, MAX, BAND, BOR, BXOR; complex: SUM, AVG, "
                    "PREMUL_SUM; float8: copy collectives only)");
  }
  return op;
}

// One dense tensor, of any strides (torch/strided.h), on the CPU or a CUDA device.
void checkTensor(const char* op, const at::Tensor& t) {
  TORCH_CHECK(t.defined(), "ringguard: ", op, ": undefined tensor");
  if (t.is_sparse()) unsupported(op, "sparse " + describe(t));
  TORCH_CHECK(t.device().is_cpu() || t.device().is_cuda(), "ringguard: ", op, ": ", describe(t),
              ": only cpu and cuda tensors are supported");
}

void checkSingle(const char* op, const std::vector<at::Tensor>& tensors) {
  TORCH_CHECK(tensors.size() == 1, "ringguard: ", op, ": expects exactly one tensor per call, got ",
              tensors.size());
  checkTensor(op, tensors[0]);
}

// The tensor's bytes as a flat uint8 tensor (the same storage when it is contiguous, else a copy: reshape
// alone may give a strided view, of a column say).
at::Tensor bytesOf(const at::Tensor& t) { return t.contiguous().view({-1}).view(at::kByte); }

// What a copy collective moves: the tensor as its own dtype where the engine has it, so that the fingerprint
// compares dtypes across ranks and RINGGUARD_NAN_CHECK scans floating inputs; else as bytes.
struct CopyView {
  at::Tensor flat;  // the same storage when the tensor is contiguous, else a copy (inputs only)
  DataType dtype = DataType::kUint8;
  size_t count = 0;
};
CopyView copyViewOf(const at::Tensor& t) {
  CopyView v;
  if (toDataType(t.scalar_type(), &v.dtype)) {
    v.flat = t.contiguous().view({-1});
  } else {
    v.flat = bytesOf(t);
    v.dtype = DataType::kUint8;
  }
  v.count = size_t(v.flat.numel());
  return v;
}

std::exception_ptr currentException() { return std::current_exception(); }

// The depth of overrides on this thread, and whether the outermost one's call reached a communicator
// (launch() sets it before it starts the collective): ProcessGroupRingguard::rejected enters a rejected
// call only from the outermost override, and only if nothing was started.
thread_local int overrideDepth = 0;
thread_local bool overrideStarted = false;
struct RejectionScope {
  RejectionScope() {
    if (overrideDepth++ == 0) overrideStarted = false;
  }
  ~RejectionScope() { --overrideDepth; }
};

at::Tensor firstOf(const std::vector<at::Tensor>& tensors) {
  return tensors.empty() ? at::Tensor() : tensors[0];
}

}  // namespace

ProcessGroupRingguard::ProcessGroupRingguard(c10::intrusive_ptr<c10d::Store> store, int rank, int size,
                                             const std::map<std::string, std::string>& options,
                                             c10::intrusive_ptr<c10d::Backend> gloo,
                                             const std::vector<int>& globalRanks)
    : c10d::Backend(rank, size), store_(std::move(store)), gloo_(std::move(gloo)), optionMap_(options) {
  if (Status nul = checkSettingMap(optionMap_); !nul.isOk())
    throw std::invalid_argument("ringguard: " + nul.message());
  std::set<std::string> known;
  for (const auto& v : envRegistry()) known.insert(v.name);
  for (const auto& kv : optionMap_) {
    if (!known.count(kv.first)) {
      throw std::invalid_argument("ringguard: unknown option '" + kv.first + "' (see docs/ENV.md)");
    }
  }
  warnUnknownEnv();  // as Options::fromEnv does: a misspelt RINGGUARD_* variable is named once per process
  Status st = ringguard::Options::fromLookup([this](const char* name) { return option(name); }, &options_);
  if (!st.isOk()) throw std::invalid_argument("ringguard: " + st.message());
  TORCH_CHECK(gloo_, "ringguard: a Gloo backend over the same ranks is required");
  TORCH_CHECK(gloo_->getRank() == rank && gloo_->getSize() == size, "ringguard: the Gloo backend has rank ",
              gloo_->getRank(), " of ", gloo_->getSize(), ", expected ", rank, " of ", size);
  fault_ = options_.fault;
  st = parseSetting(
      "RINGGUARD_STAGED_CHUNK_BYTES", [this](const char* name) { return option(name); }, &stagedChunkBytes_);
  if (!st.isOk()) throw std::invalid_argument("ringguard: " + st.message());
  agreeOnCpuTransport();
  if (useMpi()) {
    st = createMpiCommunicator(globalRanks);
    TORCH_CHECK(st.isOk(), "ringguard: CPU communicator over MPI: ", st.toString());
  } else {
    StoreBootstrap bootstrap(store_, gloo_, "ringguard/cpu", kCpuTagBase, cpuSharedMemory());
    st = createHostCommunicator(bootstrap, options_, &cpu_);
    TORCH_CHECK(st.isOk(), "ringguard: ", st.toString());
  }
  // send/recv: the engine's verified point-to-point, one lane per (peer, direction), over a c10d transport
  // of their own on the same Gloo backend, through shared memory as the CPU communicator's when the ranks
  // share a host (RINGGUARD_CPU_TRANSPORT; under mpirun, where that says mpi, as auto).
  std::unique_ptr<Transport> lanes;
  StoreBootstrap p2pBootstrap(store_, gloo_, "ringguard/p2p", kP2pTagBase, cpuSharedMemory());
  st = p2pBootstrap.createHostTransport(&lanes);
  TORCH_CHECK(st.isOk(), "ringguard: send/recv transport: ", st.toString());
  p2p_ = std::make_unique<PeerLanes>(std::move(lanes), options_);
  cpuLane_ = std::make_unique<CompletionLane>("rg-done-cpu");
  cudaLane_ = std::make_unique<CompletionLane>("rg-done-cuda");
  init();
}

ProcessGroupRingguard::~ProcessGroupRingguard() { stop(/*abort=*/false); }

void ProcessGroupRingguard::rejected(CollectiveKind kind, const at::Tensor& t) {
  // In the handler the override's scope has ended: depth 0 means no override of this thread is still
  // running, so this one was the outermost.
  if (overrideDepth == 0 && !overrideStarted) {
    try {
      const bool cuda = t.defined() && t.is_cuda();
      // The staged variants of CUDA all-reduces and all-gathers run on the CPU communicator.
      const bool staged = cuda && ((kind == CollectiveKind::kAllreduce && stagedSelected("all_reduce", t)) ||
                                   (kind == CollectiveKind::kAllgather && stagedSelected("all_gather", t)));
      Communicator* comm = nullptr;
      void* stream = nullptr;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!stopped_) comm = cuda && !staged ? cuda_.get() : cpu_.get();
      }
#if RINGGUARD_TORCH_CUDA
      if (cuda && !staged) stream = c10::cuda::getCurrentCUDAStream(t.device().index()).stream();
#endif
      if (comm != nullptr) comm->rejectedAsync(kind, stream);
    } catch (...) {
      // The caller gets the rejection's own error.
    }
  }
  throw;
}

c10::intrusive_ptr<c10d::Backend::Options> ProcessGroupRingguard::getBackendOptions() {
  return c10::make_intrusive<Backend::Options>("ringguard", options_.timeout);
}

// A RINGGUARD_* setting: this group's pg_options first, then the environment (nullptr: unset).
const char* ProcessGroupRingguard::option(const char* name) const {
  auto it = optionMap_.find(name);
  return it != optionMap_.end() ? it->second.c_str() : envLookup(name);
}

// Under mpirun RINGGUARD_CPU_TRANSPORT picks between two setups, over MPI (auto, mpi) or over the Store
// (shm, gloo): ranks whose values differ would each wait in the other's, MPI's without a timeout. So the
// ranks compare the values first, over the Store (bounded by its timeout), and all fail naming both.
void ProcessGroupRingguard::agreeOnCpuTransport() {
  if (!std::getenv("OMPI_COMM_WORLD_SIZE") && !std::getenv("PMI_SIZE")) return;
  // The value as parsed (unset is the default, auto), or the text that does not parse.
  std::string mine;
  if (!parseSetting(
           "RINGGUARD_CPU_TRANSPORT", [this](const char* name) { return option(name); }, &mine)
           .isOk()) {
    mine = option("RINGGUARD_CPU_TRANSPORT");
  }
  StoreBootstrap bootstrap(store_, gloo_, "ringguard/cpu_transport", kCpuTagBase);
  std::vector<std::vector<uint8_t>> all;
  const Status st = bootstrap.allgather(std::vector<uint8_t>(mine.begin(), mine.end()), &all);
  TORCH_CHECK(st.isOk(), "ringguard: comparing RINGGUARD_CPU_TRANSPORT between ranks: ", st.toString());
  for (size_t r = 0; r < all.size(); ++r) {
    const std::string theirs(all[r].begin(), all[r].end());
    if (theirs == mine) continue;
    throw std::invalid_argument("ringguard: " + cpuTransportDiffers(rank_, mine, int(r), theirs).message());
  }
}

// RINGGUARD_CPU_TRANSPORT: auto takes MPI when mpirun started us (its environment is there) and the build
// has MPI.
bool ProcessGroupRingguard::useMpi() {
  std::string kind;  // choices and default: the setting's declaration (core/settings.cc)
  const Status st = parseSetting(
      "RINGGUARD_CPU_TRANSPORT", [this](const char* name) { return option(name); }, &kind);
  if (!st.isOk()) return false;  // the Store's setup publishes the error to every rank (cpuSharedMemory)
#if RINGGUARD_TORCH_MPI
  if (kind == "mpi") return true;
  return kind == "auto" && (std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE"));
#else
  TORCH_CHECK(kind != "mpi", "ringguard: RINGGUARD_CPU_TRANSPORT=mpi, but this build has no MPI");
  return false;
#endif
}

// RINGGUARD_CPU_TRANSPORT without MPI: auto tries shared memory, shm insists on it, gloo keeps the Gloo
// helper. A value that does not parse is published in the setup's first exchange
// (SharedMemoryChoice::invalid), so every rank fails with it instead of waiting for this one.
SharedMemoryChoice ProcessGroupRingguard::cpuSharedMemory() {
  return readSharedMemoryChoice([this](const char* name) { return option(name); }, "gloo", options_.timeout);
}

// MPI over exactly this group's ranks: MPI_Comm_create_group is collective over the members only, as the
// creator is (non-members of a new_group never get here).
Status ProcessGroupRingguard::createMpiCommunicator(const std::vector<int>& globalRanks) {
#if RINGGUARD_TORCH_MPI
  std::vector<int> ranks = globalRanks;
  if (ranks.empty()) {
    for (int r = 0; r < size_; ++r) ranks.push_back(r);
  }
  int worldRank = -1, worldSize = 0;
  RINGGUARD_RETURN_IF_ERROR(mpi::worldPosition(&worldRank, &worldSize));
  const int highest = ranks.empty() ? -1 : *std::max_element(ranks.begin(), ranks.end());
  if (highest >= worldSize) {  // every rank of the group sees this, whatever its own rank
    return Status(StatusCode::kInvalidArgument,
                  "the group has torch rank " + std::to_string(highest) + " but MPI_COMM_WORLD has " +
                      std::to_string(worldSize) + " process" + (worldSize == 1 ? "" : "es") +
                      ": RINGGUARD_CPU_TRANSPORT=mpi needs the job started by mpirun (a launcher such as "
                      "torchrun starts each rank as an MPI job of its own); set RINGGUARD_CPU_TRANSPORT=gloo "
                      "or auto");
  }
  if (int(ranks.size()) != size_ || ranks[size_t(rank_)] != worldRank) {
    return Status(StatusCode::kInvalidArgument,
                  "group rank " + std::to_string(rank_) + " is torch rank " +
                      std::to_string(ranks.size() == size_t(size_) ? ranks[size_t(rank_)] : -1) +
                      " but MPI rank " + std::to_string(worldRank) +
                      ": under mpirun torch's ranks must be MPI's (call ringguard.init_from_mpi() before "
                      "init_process_group), or set RINGGUARD_CPU_TRANSPORT=gloo");
  }
  // auto: MPI under shared memory when the ranks share a host (as for a C++ job under mpirun); mpi: MPI
  // alone.
  std::unique_ptr<Bootstrap> bootstrap;
  RINGGUARD_RETURN_IF_ERROR(mpi::createGroupBootstrap(
      ranks, &bootstrap,
      mpi::mpiSharedMemory([this](const char* name) { return option(name); }, options_.timeout)));
  return createHostCommunicator(*bootstrap, options_, &cpu_);
#else
  (void)globalRanks;
  return Status(StatusCode::kInvalidArgument, "this build has no MPI");
#endif
}

Communicator* ProcessGroupRingguard::communicatorFor(const at::Tensor& t, const char* op) {
  std::lock_guard<std::mutex> lock(mutex_);
  TORCH_CHECK(!stopped_, "ringguard: ", op, " after ", stoppedBy_);
  if (t.device().is_cpu()) return cpu_.get();
#if RINGGUARD_TORCH_CUDA
  const int device = t.device().index();
  if (!cuda_) {
    cuda::DeviceOptions dev;
    Status st = cuda::DeviceOptions::fromLookup([this](const char* name) { return option(name); }, &dev);
    TORCH_CHECK(st.isOk(), "ringguard: ", st.toString());
    dev.device = device;
    c10::cuda::CUDAGuard guard(device);
    ringguard::Options o = options_;
    o.fault = fault_;
    // The Store carries the agreement on NCCL and its unique id, Gloo the staged data path or NCCL's control
    // channel.
    StoreBootstrap bootstrap(store_, gloo_, "ringguard/cuda", kCudaTagBase);
    st = cuda::createDeviceCommunicator(bootstrap, o, dev, &cuda_);
    TORCH_CHECK(st.isOk(), "ringguard: creating the CUDA communicator: ", st.toString());
    cudaDevice_ = device;
  }
  TORCH_CHECK(device == cudaDevice_, "ringguard: ", op, ": ", describe(t),
              ", but this process group uses cuda:", cudaDevice_, " (one device per rank)");
  return cuda_.get();
#else
  TORCH_CHECK(false, "ringguard: ", op, ": ", describe(t), ": this build of ringguard has no CUDA support");
#endif
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRingguard::launchAllreduce(const char* op,
                                                                      const at::Tensor& buffer, size_t count,
                                                                      DataType dtype, ReduceOp rop,
                                                                      std::vector<at::Tensor> outputs,
                                                                      std::function<void()> after) {
  void* data = buffer.data_ptr();
  return launch(
      op, buffer,
      [=](Communicator* comm, void* stream) {
        return comm->allreduceAsync(data, data, count, dtype, rop, stream);
      },
      std::move(outputs), std::move(after));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRingguard::launch(const char* op, const at::Tensor& buffer,
                                                             Start start, std::vector<at::Tensor> outputs,
                                                             std::function<void()> after, bool nestedOutputs,
                                                             std::vector<at::Tensor> keep) {
  Communicator* comm = communicatorFor(buffer, op);
  auto p = std::make_shared<PendingCollective>();
  std::vector<c10::Device> devices;
  void* stream = nullptr;
#if RINGGUARD_TORCH_CUDA
  if (buffer.is_cuda()) {
    devices.push_back(buffer.device());
    p->device = buffer.device().index();
    stream = c10::cuda::getCurrentCUDAStream(buffer.device().index()).stream();
  }
#endif
  p->stream = stream;
  c10::TypePtr type = c10::ListType::create(c10::TensorType::get());
  if (nestedOutputs) {
    type = c10::ListType::create(type);
    c10::List<c10::List<at::Tensor>> nested;
    nested.push_back(c10::List<at::Tensor>(outputs));
    p->value = c10::IValue(nested);
  } else {
    p->value = c10::IValue(outputs);
  }
  p->future = c10::make_intrusive<c10::ivalue::Future>(type, devices);
  p->c10dWork = c10::make_intrusive<C10dWork>(rank_, c10d::OpType::UNKNOWN, op, outputs, p->future);
  p->keep = outputs;
  p->keep.push_back(buffer);
  p->keep.insert(p->keep.end(), keep.begin(), keep.end());
  p->after = std::move(after);
  ++sequence_;
  overrideStarted = true;  // an exception from here on is not a rejected call (rejected())
  p->work = start(comm, stream);
  c10::intrusive_ptr<c10d::Work> work = p->c10dWork;
  (buffer.is_cuda() ? cudaLane_ : cpuLane_)->push(std::move(p));
  coalesce(work);
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRingguard::allreduce(std::vector<at::Tensor>& tensors,
                                                                const c10d::AllreduceOptions& opts) try {
  const RejectionScope scope;
  checkSingle("allreduce", tensors);
  ContiguousOutputs dense("allreduce");
  const at::Tensor t = dense(tensors[0]);
  DataType dt;
  ReduceOp op;
  if (!toDataType(t.scalar_type(), &dt)) {
    unsupported("allreduce", "dtype of " + describe(t) +
                                 "; allreduce takes float32, float64, float16, bfloat16, int8, int16, "
                                 "int32, int64, uint8, bool, complex64 and complex128");
  }
  op = reduceOpFor("allreduce", opts.reduceOp, t, dt);
  premulOnOneRank(t, &op, /*inPlace=*/true);
  if (stagedSelected("all_reduce", t))
    return launch("allreduce", t, stagedAllreduceStart({t}, {dt}, op), tensors, dense.after());
  return launchAllreduce("allreduce", t, size_t(t.numel()), dt, op, tensors, dense.after());
} catch (...) {
  rejected(CollectiveKind::kAllreduce, firstOf(tensors));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRingguard::broadcast(std::vector<at::Tensor>& tensors,
                                                                const c10d::BroadcastOptions& opts) try {
  const RejectionScope scope;
  checkSingle("broadcast", tensors);
  TORCH_CHECK(opts.rootTensor == 0, "ringguard: broadcast: rootTensor must be 0");
  TORCH_CHECK(opts.rootRank >= 0 && opts.rootRank < size_, "ringguard: broadcast: root rank ", opts.rootRank,
              " is outside [0, ", size_, ")");
  ContiguousOutputs dense("broadcast");
  const at::Tensor t = dense(tensors[0]);
  // The native pipelined chain: any dtype, verified slice by slice like every collective.
  const CopyView v = copyViewOf(t);
  void* data = v.flat.data_ptr();
  const size_t n = v.count;
  const DataType dt = v.dtype;
  const int root = int(opts.rootRank);
  return launch(
      "broadcast", v.flat,
      [=](Communicator* comm, void* stream) { return comm->broadcastAsync(data, data, n, dt, root, stream); },
      tensors, dense.after());
} catch (...) {
  rejected(CollectiveKind::kBroadcast, firstOf(tensors));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRingguard::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                                std::vector<at::Tensor>& inputs,
                                                                const c10d::AllgatherOptions& opts) try {
  const RejectionScope scope;
  checkSingle("allgather", inputs);
  TORCH_CHECK(outputs.size() == 1, "ringguard: allgather: expects one output list, got ", outputs.size());
  const at::Tensor& in = inputs[0];
  std::vector<at::Tensor> outs = outputs[0];
  TORCH_CHECK(int(outs.size()) == size_, "ringguard: allgather: the output list has ", outs.size(),
              " tensors, the group has ", size_, " ranks");
  for (const auto& o : outs) {
    checkTensor("allgather", o);
    checkWritable("allgather", o);
    TORCH_CHECK(o.numel() == in.numel() && o.scalar_type() == in.scalar_type() && o.device() == in.device(),
                "ringguard: allgather: output ", describe(o), " of ", o.numel(),
                " elements does not match the input ", describe(in), " of ", in.numel());
  }
  // The native ring all-gather into one flat buffer (every block verified where it lands), then copied
  // out into the list.
  const CopyView v = copyViewOf(in);
  at::Tensor mine = v.flat;
  const int64_t n = int64_t(v.count);
  const DataType dt = v.dtype;
  at::Tensor flat = at::empty({n * size_}, mine.options());
  // A skipped collective (RINGGUARD_NAN_CHECK=skip) leaves its output as it was: here the list, which is
  // copied out of `flat` after it, so `flat` starts as the list.
  if (options_.nanCheck == NanCheck::kSkip) {
    for (size_t r = 0; r < outs.size(); ++r)
      flat.narrow(0, n * int64_t(r), n).copy_(copyViewOf(outs[r]).flat);
  }
  auto after = [outs, flat, n]() {
    for (size_t r = 0; r < outs.size(); ++r) copyInto(outs[r], flat.narrow(0, n * int64_t(r), n));
  };
  Start start = stagedSelected("all_gather", flat)
                    ? stagedAllgatherStart(mine, flat, size_t(n), dt)
                    : [mine, flat, n, dt](Communicator* comm, void* stream) {
                        return comm->allgatherAsync(mine.data_ptr(), flat.data_ptr(), size_t(n), dt, stream);
                      };
  return launch("allgather", flat, std::move(start), outs, after, /*nestedOutputs=*/true, {mine});
} catch (...) {
  rejected(CollectiveKind::kAllgather, firstOf(inputs));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRingguard::_allgather_base(
    at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) try {
  const RejectionScope scope;
  checkTensor("all_gather_into_tensor", input);
  checkTensor("all_gather_into_tensor", output);
  TORCH_CHECK(output.numel() == input.numel() * size_ && output.scalar_type() == input.scalar_type() &&
                  output.device() == input.device(),
              "ringguard: all_gather_into_tensor: output ", describe(output), " of ", output.numel(),
              " elements must hold ", size_, " x the input ", describe(input), " of ", input.numel());
  ContiguousOutputs dense("all_gather_into_tensor");
  const CopyView out = copyViewOf(dense(output));
  CopyView v = copyViewOf(input);
  const int64_t n = int64_t(v.count);
  const int64_t nb = n * int64_t(v.flat.element_size());
  // The input may be this rank's block of the output (in place, as FSDP does); any other overlap is copied.
  const auto* own = static_cast<const uint8_t*>(out.flat.data_ptr()) + nb * rank_;
  const auto* in0 = static_cast<const uint8_t*>(v.flat.data_ptr());
  const auto* out0 = static_cast<const uint8_t*>(out.flat.data_ptr());
  if (in0 != own && nb > 0 && in0 < out0 + nb * size_ && out0 < in0 + nb) v.flat = v.flat.clone();
  at::Tensor mine = v.flat, dst = out.flat;
  const DataType dt = v.dtype;
  Start start = stagedSelected("all_gather", dst)
                    ? stagedAllgatherStart(mine, dst, size_t(n), dt)
                    : [mine, dst, n, dt](Communicator* comm, void* stream) {
                        return comm->allgatherAsync(mine.data_ptr(), dst.data_ptr(), size_t(n), dt, stream);
                      };
  return launch("all_gather_into_tensor", dst, std::move(start), {output}, dense.after(),
                /*nestedOutputs=*/false, {mine});
} catch (...) {
  rejected(CollectiveKind::kAllgather, output);
}

// RINGGUARD_NAN_CHECK=skip keeps the ring: a skipped chunk would leave the host result of an earlier chunk
// where the copies back read it, while the ring leaves the output as it was (its documented meaning).
bool ProcessGroupRingguard::stagedSelected(const char* family, const at::Tensor& t) const {
  return t.is_cuda() && options_.nanCheck != NanCheck::kSkip &&
         processPolicyVariant(family) == "staged_chunked";
}

ProcessGroupRingguard::Start ProcessGroupRingguard::stagedStart(int device,
                                                                std::function<Status(HostStager&)> run,
                                                                std::atomic<uint64_t>* done, uint64_t calls) {
  return [this, device, run = std::move(run), done, calls](Communicator*,
                                                           void* stream) -> std::shared_ptr<ringguard::Work> {
#if RINGGUARD_TORCH_CUDA
    std::lock_guard<std::mutex> lock(stagedMutex_);
    c10::cuda::CUDAGuard guard(device);
    Status st;
    if (!stager_) st = cuda::makeDeviceStager(device, &stager_);
    if (st.isOk()) {
      stager_->setStream(stream);
      st = run(*stager_);
    }
    if (st.isOk()) *done += calls;
    return ringguard::Work::completed(std::move(st));
#else
    (void)device, (void)stream, (void)done, (void)calls;
    return ringguard::Work::completed(
        Status(StatusCode::kInvalidArgument, "the staged collectives need a build with CUDA"));
#endif
  };
}

ProcessGroupRingguard::Start ProcessGroupRingguard::stagedAllgatherStart(const at::Tensor& send,
                                                                         const at::Tensor& recv, size_t count,
                                                                         DataType dt) {
  const size_t chunk = size_t(stagedChunkBytes_);
  return stagedStart(
      recv.device().index(),
      [this, send, recv, count, dt, chunk](HostStager& stager) {
        return stagedAllgather(*cpu_, stager, send.data_ptr(), recv.data_ptr(), count, dt, chunk);
      },
      &stagedAllgathers_, 1);
}

ProcessGroupRingguard::Start ProcessGroupRingguard::stagedAllreduceStart(
    const std::vector<at::Tensor>& tensors, const std::vector<DataType>& dts, ReduceOp op) {
  const size_t chunk = size_t(stagedChunkBytes_);
  return stagedStart(
      tensors[0].device().index(),
      [this, tensors, dts, op, chunk](HostStager& stager) {
        for (size_t i = 0; i < tensors.size(); ++i) {
          void* data = tensors[i].data_ptr();
          RINGGUARD_RETURN_IF_ERROR(
              stagedAllreduce(*cpu_, stager, data, data, size_t(tensors[i].numel()), dts[i], op, chunk));
        }
        return Status::ok();
      },
      &stagedAllreduces_, tensors.size());
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRingguard::barrier(const c10d::BarrierOptions& opts) {
  for (int64_t id : opts.device_ids) {
    TORCH_CHECK(id >= 0, "ringguard: barrier: device id ", id, " in device_ids is negative");
  }
  // A one-element verified allreduce returns once every rank has entered. With device_ids torch sets
  // opts.device to (accelerator, device_ids[0]); on a CUDA device the barrier runs there, as NCCL's does,
  // and also orders that device's current stream. Otherwise (torch may pick the current CUDA device for a
  // plain barrier) it stays on the CPU communicator, so a barrier never creates the CUDA one.
  at::Device device(at::kCPU);
  if (!opts.device_ids.empty() && opts.device.has_value() && opts.device->is_cuda()) device = *opts.device;
  at::Tensor t = at::zeros({1}, at::TensorOptions().dtype(at::kInt).device(device));
  return launchAllreduce("barrier", t, 1, DataType::kInt32, ReduceOp::kSum, {t}, nullptr);
}

// Every rank sets its key; rank 0 waits for each in turn (then only checks, once the time is up) and
// publishes a verdict that the others wait for (twice the timeout: rank 0 may itself arrive late).
void ProcessGroupRingguard::monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks) {
  c10::intrusive_ptr<c10d::Store> store;
  uint64_t number = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    TORCH_CHECK(!stopped_, "ringguard: monitored_barrier after ", stoppedBy_);
    store = store_;
    number = monitoredBarriers_++;
  }
  using std::chrono::milliseconds;
  const milliseconds timeout = opts.timeout.count() > 0 ? opts.timeout : options_.timeout;
  const std::string base = "ringguard/monitored_barrier/" + std::to_string(number) + "/";
  const std::string verdictKey = base + "verdict";
  const std::string within = " within " + std::to_string(timeout.count()) + " ms";
  if (rank_ != 0) {
    store->set(base + std::to_string(rank_), std::vector<uint8_t>{1});
    std::vector<uint8_t> verdict;
    try {
      store->wait({verdictKey}, 2 * timeout);
      verdict = store->get(verdictKey);
    } catch (const std::exception& e) {
      C10_THROW_ERROR(DistBackendError, "ringguard: monitored_barrier on rank " + std::to_string(rank_) +
                                            ": no verdict from rank 0" + within + " (x2): " + e.what());
    }
    const std::string text(verdict.begin(), verdict.end());
    if (text != "ok") C10_THROW_ERROR(DistBackendError, text);
    return;
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::vector<int> missing;
  for (int r = 1; r < size_ && (waitAllRanks || missing.empty()); ++r) {
    const std::string key = base + std::to_string(r);
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
    bool arrived = false;
    if (left.count() > 0) {
      try {
        store->wait({key}, left);
        arrived = true;
      } catch (const std::exception&) {
        arrived = store->check({key});  // a Store error, not a timeout, is raised from here
      }
    } else {
      arrived = store->check({key});
    }
    if (arrived) {
      store->deleteKey(key);
    } else {
      missing.push_back(r);
    }
  }
  std::string verdict = "ok";
  if (!missing.empty()) {
    std::ostringstream m;
    m << "ringguard: monitored_barrier: rank" << (missing.size() > 1 ? "s " : " ");
    for (size_t i = 0; i < missing.size(); ++i) m << (i ? ", " : "") << missing[i];
    m << " of " << size_ << " did not arrive" << within << " (seen by rank 0"
      << (waitAllRanks ? "" : "; the first one missing, wait_all_ranks=True names all") << ")";
    verdict = m.str();
  }
  store->set(verdictKey, std::vector<uint8_t>(verdict.begin(), verdict.end()));
  if (!missing.empty()) C10_THROW_ERROR(DistBackendError, verdict);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRingguard::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) try {
  const RejectionScope scope;
  const char* name = "reduce_scatter_tensor";
  checkTensor(name, input);
  checkTensor(name, output);
  TORCH_CHECK(input.numel() == output.numel() * size_ && output.scalar_type() == input.scalar_type() &&
                  output.device() == input.device(),
              "ringguard: reduce_scatter_tensor: input ", describe(input), " of ", input.numel(),
              " elements must hold ", size_, " x the output ", describe(output), " of ", output.numel());
  DataType dt;
  ReduceOp op;
  if (!toDataType(input.scalar_type(), &dt)) unsupported(name, "dtype of " + describe(input));
  op = reduceOpFor(name, opts.reduceOp, input, dt);
  at::Tensor in = premulOnOneRank(input.contiguous(), &op, /*inPlace=*/false);
  ContiguousOutputs dense(name);
  const at::Tensor out = dense(output);
  // The native ring's reduce steps: block r of the input, reduced over the ranks, lands in rank r's output.
  const size_t count = size_t(output.numel());
  return launch(name, out,
                [in, out, count, dt, op](Communicator* comm, void* stream) {
                  return comm->reduceScatterAsync(in.data_ptr(), out.data_ptr(), count, dt, op, stream);
                },
                {output}, dense.after(), /*nestedOutputs=*/false, {in});
} catch (...) {
  rejected(CollectiveKind::kReduceScatter, output);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRingguard::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) try {
  const RejectionScope scope;
  checkSingle("reduce_scatter", outputs);
  TORCH_CHECK(inputs.size() == 1 && int(inputs[0].size()) == size_,
              "ringguard: reduce_scatter: expects one input list of ", size_, " tensors");
  at::Tensor out = outputs[0];
  for (const auto& t : inputs[0]) {
    TORCH_CHECK(
        t.numel() == out.numel() && t.scalar_type() == out.scalar_type() && t.device() == out.device(),
        "ringguard: reduce_scatter: input ", describe(t), " of ", t.numel(),
        " elements does not match the output ", describe(out), " of ", out.numel());
  }
  // One flat input (the list in rank order), then the tensor form (which takes the output as it is).
  at::Tensor flat = at::cat(inputs[0]).reshape({-1});
  return _reduce_scatter_base(out, flat, opts);
} catch (...) {
  rejected(CollectiveKind::kReduceScatter, firstOf(outputs));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRingguard::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                                    std::vector<int64_t>& outputSplits,
                                                                    std::vector<int64_t>& inputSplits,
                                                                    const c10d::AllToAllOptions& opts) try {
  const RejectionScope scope;
  const char* name = "all_to_all_single";
  checkTensor(name, input);
  checkTensor(name, output);
  TORCH_CHECK(output.scalar_type() == input.scalar_type() && output.device() == input.device(),
              "ringguard: all_to_all_single: output ", describe(output), " and input ", describe(input),
              " must have one dtype and device");
  // Splits count rows of dim 0 (empty: equal rows); the exchange moves the tensors as their dtype where the
  // engine has it (so RINGGUARD_NAN_CHECK scans the blocks sent), as bytes otherwise.
  ContiguousOutputs dense(name);
  const CopyView in = copyViewOf(input), out = copyViewOf(dense(output));
  auto toCounts = [this, name](const at::Tensor& t, const CopyView& v, const std::vector<int64_t>& splits,
                               std::vector<size_t>* counts, std::vector<size_t>* displs) {
    const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
    const size_t rowUnits = rows == 0 ? 0 : v.count / size_t(rows);  // the view's elements per row
    counts->assign(size_t(size_), 0);
    displs->assign(size_t(size_), 0);
    if (splits.empty()) {
      TORCH_CHECK(rows % size_ == 0, "ringguard: ", name, ": ", describe(t), " has ", rows,
                  " rows, not divisible by the group size ", size_, " (give split sizes)");
    } else {
      TORCH_CHECK(int(splits.size()) == size_, "ringguard: ", name, ": ", splits.size(), " split sizes for ",
                  size_, " ranks");
    }
    int64_t sum = 0;
    for (int p = 0; p < size_; ++p) {
      const int64_t r = splits.empty() ? rows / size_ : splits[size_t(p)];
      TORCH_CHECK(r >= 0, "ringguard: ", name, ": negative split size ", r);
      (*displs)[size_t(p)] = size_t(sum) * rowUnits;
      (*counts)[size_t(p)] = size_t(r) * rowUnits;
      sum += r;
    }
    TORCH_CHECK(sum == rows, "ringguard: ", name, ": split sizes add up to ", sum, " rows, ", describe(t),
                " has ", rows);
  };
  std::vector<size_t> sc, sd, rc, rd;
  toCounts(input, in, inputSplits, &sc, &sd);
  toCounts(output, out, outputSplits, &rc, &rd);
  const at::Tensor src = in.flat, dst = out.flat;
  const DataType dt = in.dtype;
  return launch(name, dst,
                [src, dst, sc, sd, rc, rd, dt](Communicator* comm, void* stream) {
                  return comm->alltoallAsync(src.data_ptr(), sc, sd, dst.data_ptr(), rc, rd, dt, stream);
                },
                {output}, dense.after(), /*nestedOutputs=*/false, {src});
} catch (...) {
  rejected(CollectiveKind::kAlltoall, output);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRingguard::alltoall(std::vector<at::Tensor>& outputs,
                                                               std::vector<at::Tensor>& inputs,
                                                               const c10d::AllToAllOptions& opts) try {
  const RejectionScope scope;
  TORCH_CHECK(int(outputs.size()) == size_ && int(inputs.size()) == size_, "ringguard: all_to_all: expects ",
              size_, " input and output tensors, got ", inputs.size(), " and ", outputs.size());
  // The list in rank order as one flat buffer each way, then copied out into the output list. Tensors of
  // one dtype move as it (so RINGGUARD_NAN_CHECK scans them), a mix of dtypes as bytes.
  bool oneDtype = true;
  for (int p = 0; p < size_; ++p) {
    checkTensor("all_to_all", inputs[size_t(p)]);
    checkTensor("all_to_all", outputs[size_t(p)]);
    checkWritable("all_to_all", outputs[size_t(p)]);
    TORCH_CHECK(
        inputs[size_t(p)].device() == inputs[0].device() && outputs[size_t(p)].device() == inputs[0].device(),
        "ringguard: all_to_all: every tensor must be on ", inputs[0].device());
    oneDtype = oneDtype && inputs[size_t(p)].scalar_type() == inputs[0].scalar_type() &&
               outputs[size_t(p)].scalar_type() == inputs[0].scalar_type();
  }
  auto view = [oneDtype](const at::Tensor& t) { return oneDtype ? copyViewOf(t).flat : bytesOf(t); };
  std::vector<at::Tensor> blocks;
  std::vector<size_t> sc, sd, rc, rd;
  size_t sendTotal = 0, recvTotal = 0;
  for (int p = 0; p < size_; ++p) {
    blocks.push_back(view(inputs[size_t(p)]));
    sd.push_back(sendTotal);
    sc.push_back(size_t(blocks.back().numel()));
    sendTotal += sc.back();
    rd.push_back(recvTotal);
    rc.push_back(size_t(view(outputs[size_t(p)]).numel()));
    recvTotal += rc.back();
  }
  at::Tensor in = at::cat(blocks);
  const DataType dt = oneDtype ? copyViewOf(inputs[0]).dtype : DataType::kUint8;
  at::Tensor out = at::empty({int64_t(recvTotal)}, in.options());
  std::vector<at::Tensor> outs = outputs;
  // A skipped collective (RINGGUARD_NAN_CHECK=skip) leaves the output list as it was: `out` starts as it.
  if (options_.nanCheck == NanCheck::kSkip) {
    for (size_t p = 0; p < outs.size(); ++p)
      out.narrow(0, int64_t(rd[p]), int64_t(rc[p])).copy_(view(outs[p]));
  }
  auto after = [outs, out, rc, rd]() {
    for (size_t p = 0; p < outs.size(); ++p) copyInto(outs[p], out.narrow(0, int64_t(rd[p]), int64_t(rc[p])));
  };
  return launch("all_to_all", out,
                [in, out, sc, sd, rc, rd, dt](Communicator* comm, void* stream) {
                  return comm->alltoallAsync(in.data_ptr(), sc, sd, out.data_ptr(), rc, rd, dt, stream);
                },
                outs, after, /*nestedOutputs=*/false, {in});
} catch (...) {
  rejected(CollectiveKind::kAlltoall, firstOf(outputs));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRingguard::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) try {
  const RejectionScope scope;
  const char* name = "allreduce_coalesced";
  TORCH_CHECK(!tensors.empty(), "ringguard: ", name, ": no tensors");
  ReduceOp op = ReduceOp::kSum;
  std::vector<DataType> dts;
  ContiguousOutputs dense(name);
  std::vector<at::Tensor> ts;
  for (const at::Tensor& t : tensors) {
    checkTensor(name, t);
    ts.push_back(dense(t));
    TORCH_CHECK(t.device() == tensors[0].device(), "ringguard: ", name, ": every tensor must be on ",
                tensors[0].device());
    DataType dt;
    if (!toDataType(t.scalar_type(), &dt)) unsupported(name, "dtype of " + describe(t));
    op = reduceOpFor(name, opts.reduceOp, t, dt);  // every dtype checked against the op
    dts.push_back(dt);
  }
  if (size_ == 1 && isPremulSum(op)) {
    const ReduceOp premul = op;
    for (const at::Tensor& t : ts) {
      op = premul;
      premulOnOneRank(t, &op, /*inPlace=*/true);
    }
  }
  // One verified allreduce per tensor, queued back to back (see the coalesced all-gather below), or staged
  // one after the other while the all_reduce family runs staged_chunked.
  Start start = stagedSelected("all_reduce", ts[0])
                    ? stagedAllreduceStart(ts, dts, op)
                    : [ts, dts, op](Communicator* comm, void* stream) {
                        std::shared_ptr<ringguard::Work> last;
                        for (size_t i = 0; i < ts.size(); ++i) {
                          last = comm->allreduceAsync(ts[i].data_ptr(), ts[i].data_ptr(),
                                                      size_t(ts[i].numel()), dts[i], op, stream);
                        }
                        return last;
                      };
  return launch(name, ts[0], std::move(start), tensors, dense.after(), /*nestedOutputs=*/false, ts);
} catch (...) {
  rejected(CollectiveKind::kAllreduce, firstOf(tensors));
}

// The coalesced forms enqueue one verified collective per pair, back to back, and complete with the last:
// the communicator runs its queue in order and a failure poisons everything after it, so the last one
// succeeding means every one did.
c10::intrusive_ptr<c10d::Work> ProcessGroupRingguard::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) try {
  const RejectionScope scope;
  const char* name = "allgather_into_tensor_coalesced";
  TORCH_CHECK(!inputs.empty() && inputs.size() == outputs.size(), "ringguard: ", name, ": ", inputs.size(),
              " inputs and ", outputs.size(), " outputs");
  std::vector<at::Tensor> ins, outs;
  std::vector<DataType> dts;
  ContiguousOutputs dense(name);
  for (size_t i = 0; i < inputs.size(); ++i) {
    checkTensor(name, inputs[i]);
    checkTensor(name, outputs[i]);
    TORCH_CHECK(outputs[i].numel() == inputs[i].numel() * size_ &&
                    outputs[i].scalar_type() == inputs[i].scalar_type() &&
                    outputs[i].device() == inputs[0].device() && inputs[i].device() == inputs[0].device(),
                "ringguard: ", name, ": output ", i, " ", describe(outputs[i]), " of ", outputs[i].numel(),
                " elements must hold ", size_, " x input ", describe(inputs[i]), " of ", inputs[i].numel());
    const CopyView in = copyViewOf(inputs[i]);
    ins.push_back(in.flat);
    outs.push_back(copyViewOf(dense(outputs[i])).flat);
    dts.push_back(in.dtype);
  }
  std::vector<at::Tensor> keep = ins;
  keep.insert(keep.end(), outs.begin(), outs.end());
  return launch(
      name, outs[0],
      [ins, outs, dts](Communicator* comm, void* stream) {
        std::shared_ptr<ringguard::Work> last;
        for (size_t i = 0; i < ins.size(); ++i) {
          last = comm->allgatherAsync(ins[i].data_ptr(), outs[i].data_ptr(), size_t(ins[i].numel()), dts[i],
                                      stream);
        }
        return last;
      },
      outputs, dense.after(), /*nestedOutputs=*/false, keep);
} catch (...) {
  rejected(CollectiveKind::kAllgather, firstOf(outputs));
}

// The list form: every input of every rank in one verified all-gather of one flat buffer (the inputs in
// order, as their dtype when they share one, else as bytes), then copied out: outputs[r][i] gets rank r's
// input i. Every rank must give the same total (the fingerprint compares count and dtype: an error on every
// rank otherwise); each output must match its input here.
c10::intrusive_ptr<c10d::Work> ProcessGroupRingguard::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) try {
  const RejectionScope scope;
  const char* name = "allgather_coalesced";
  TORCH_CHECK(!inputs.empty(), "ringguard: ", name, ": no input tensors");
  TORCH_CHECK(int(outputs.size()) == size_, "ringguard: ", name, ": ", outputs.size(),
              " output lists, the group has ", size_, " ranks (one list per rank)");
  bool oneDtype = true;
  for (const at::Tensor& in : inputs) {
    checkTensor(name, in);
    TORCH_CHECK(in.device() == inputs[0].device(), "ringguard: ", name, ": every tensor must be on ",
                inputs[0].device());
    oneDtype = oneDtype && in.scalar_type() == inputs[0].scalar_type();
  }
  for (size_t r = 0; r < outputs.size(); ++r) {
    TORCH_CHECK(outputs[r].size() == inputs.size(), "ringguard: ", name, ": output list ", r, " has ",
                outputs[r].size(), " tensors for ", inputs.size(), " inputs");
    for (size_t i = 0; i < inputs.size(); ++i) {
      const at::Tensor& o = outputs[r][i];
      checkTensor(name, o);
      checkWritable(name, o);
      TORCH_CHECK(o.numel() == inputs[i].numel() && o.scalar_type() == inputs[i].scalar_type() &&
                      o.device() == inputs[i].device(),
                  "ringguard: ", name, ": output ", r, "/", i, " ", describe(o), " of ", o.numel(),
                  " elements does not match input ", i, " ", describe(inputs[i]), " of ", inputs[i].numel());
    }
  }
  auto view = [oneDtype](const at::Tensor& t) { return oneDtype ? copyViewOf(t).flat : bytesOf(t); };
  const DataType dt = oneDtype ? copyViewOf(inputs[0]).dtype : DataType::kUint8;
  std::vector<at::Tensor> blocks;
  std::vector<int64_t> offsets;
  int64_t n = 0;
  for (const at::Tensor& in : inputs) {
    blocks.push_back(view(in));
    offsets.push_back(n);
    n += blocks.back().numel();
  }
  at::Tensor mine = at::cat(blocks);
  at::Tensor flat = at::empty({n * size_}, mine.options());
  std::vector<at::Tensor> outs, slots;  // every output, and its place in `flat`
  for (size_t r = 0; r < outputs.size(); ++r) {
    for (size_t i = 0; i < inputs.size(); ++i) {
      outs.push_back(outputs[r][i]);
      slots.push_back(flat.narrow(0, n * int64_t(r) + offsets[i], blocks[i].numel()));
    }
  }
  // A skipped collective (RINGGUARD_NAN_CHECK=skip) leaves the output lists as they were: `flat` starts as
  // them.
  if (options_.nanCheck == NanCheck::kSkip) {
    for (size_t k = 0; k < outs.size(); ++k) slots[k].copy_(view(outs[k]));
  }
  auto after = [outs, slots]() {
    for (size_t k = 0; k < outs.size(); ++k) copyInto(outs[k], slots[k]);
  };
  return launch(name, flat,
                [mine, flat, n, dt](Communicator* comm, void* stream) {
                  return comm->allgatherAsync(mine.data_ptr(), flat.data_ptr(), size_t(n), dt, stream);
                },
                outs, after, /*nestedOutputs=*/false, {mine});
} catch (...) {
  rejected(CollectiveKind::kAllgather, firstOf(inputs));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRingguard::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts) try {
  const RejectionScope scope;
  const char* name = "reduce_scatter_tensor_coalesced";
  TORCH_CHECK(!inputs.empty() && inputs.size() == outputs.size(), "ringguard: ", name, ": ", inputs.size(),
              " inputs and ", outputs.size(), " outputs");
  ReduceOp op = ReduceOp::kSum;
  std::vector<DataType> dts;
  for (size_t i = 0; i < inputs.size(); ++i) {
    checkTensor(name, inputs[i]);
    checkTensor(name, outputs[i]);
    TORCH_CHECK(inputs[i].numel() == outputs[i].numel() * size_ &&
                    outputs[i].scalar_type() == inputs[i].scalar_type() &&
                    outputs[i].device() == inputs[0].device() && inputs[i].device() == inputs[0].device(),
                "ringguard: ", name, ": input ", i, " ", describe(inputs[i]), " of ", inputs[i].numel(),
                " elements must hold ", size_, " x output ", describe(outputs[i]), " of ",
                outputs[i].numel());
    DataType dt;
    if (!toDataType(inputs[i].scalar_type(), &dt)) unsupported(name, "dtype of " + describe(inputs[i]));
    op = reduceOpFor(name, opts.reduceOp, inputs[i], dt);
    dts.push_back(dt);
  }
  std::vector<at::Tensor> ins, outs;
  ContiguousOutputs dense(name);
  for (size_t i = 0; i < inputs.size(); ++i) {
    ins.push_back(inputs[i].contiguous());
    outs.push_back(dense(outputs[i]));
  }
  if (size_ == 1 && isPremulSum(op)) {
    const ReduceOp premul = op;
    for (at::Tensor& in : ins) {
      op = premul;
      in = premulOnOneRank(in, &op, /*inPlace=*/false);
    }
  }
  std::vector<at::Tensor> keep = ins;
  keep.insert(keep.end(), outs.begin(), outs.end());
  return launch(
      name, outs[0],
      [ins, outs, dts, op](Communicator* comm, void* stream) {
        std::shared_ptr<ringguard::Work> last;
        for (size_t i = 0; i < ins.size(); ++i) {
          last = comm->reduceScatterAsync(ins[i].data_ptr(), outs[i].data_ptr(), size_t(outs[i].numel()),
                                          dts[i], op, stream);
        }
        return last;
      },
      outputs, dense.after(), /*nestedOutputs=*/false, keep);
} catch (...) {
  rejected(CollectiveKind::kReduceScatter, firstOf(outputs));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRingguard::reduce(std::vector<at::Tensor>& tensors,
                                                             const c10d::ReduceOptions& opts) try {
  const RejectionScope scope;
  checkSingle("reduce", tensors);
  TORCH_CHECK(opts.rootRank >= 0 && opts.rootRank < size_, "ringguard: reduce: root rank ", opts.rootRank,
              " is outside [0, ", size_, ")");
  const at::Tensor& t = tensors[0];
  DataType dt;
  ReduceOp op;
  if (!toDataType(t.scalar_type(), &dt)) unsupported("reduce", "dtype of " + describe(t));
  op = reduceOpFor("reduce", opts.reduceOp, t, dt);
  // A verified allreduce; the other ranks reduce a copy, so their tensors keep their values (as NCCL's).
  // Traffic: the allreduce's, about 2x a reduce to one rank.
  ContiguousOutputs dense("reduce");
  at::Tensor buffer = rank_ == int(opts.rootRank) ? dense(t) : t.clone(at::MemoryFormat::Contiguous);
  premulOnOneRank(buffer, &op, /*inPlace=*/true);  // one rank: the root
  return launchAllreduce("reduce", buffer, size_t(t.numel()), dt, op, tensors, dense.after());
} catch (...) {
  rejected(CollectiveKind::kAllreduce, firstOf(tensors));
}

// Gather and scatter are all-to-all exchanges in which only the root receives (gather) or sends
// (scatter): N - 1 verified flows, each block moved once.
c10::intrusive_ptr<c10d::Work> ProcessGroupRingguard::launchGather(const char* op, const at::Tensor& in,
                                                                   const at::Tensor& out, int root,
                                                                   std::vector<at::Tensor> outputs,
                                                                   std::function<void()> after,
                                                                   bool nestedOutputs, DataType dt) {
  const size_t n = size_t(in.numel());
  std::vector<size_t> sc(size_t(size_), 0), sd(size_t(size_), 0), rc(size_t(size_), 0), rd(size_t(size_), 0);
  sc[size_t(root)] = n;
  if (rank_ == root) {
    for (int p = 0; p < size_; ++p) {
      rc[size_t(p)] = n;
      rd[size_t(p)] = size_t(p) * n;
    }
  }
  return launch(op, in,
                [in, out, sc, sd, rc, rd, dt](Communicator* comm, void* stream) {
                  return comm->alltoallAsync(in.data_ptr(), sc, sd, out.data_ptr(), rc, rd, dt, stream);
                },
                std::move(outputs), std::move(after), nestedOutputs, {out});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRingguard::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                             std::vector<at::Tensor>& inputs,
                                                             const c10d::GatherOptions& opts) try {
  const RejectionScope scope;
  checkSingle("gather", inputs);
  const int root = int(opts.rootRank);
  TORCH_CHECK(root >= 0 && root < size_, "ringguard: gather: root rank ", root, " is outside [0, ", size_,
              ")");
  const CopyView v = copyViewOf(inputs[0]);  // as its dtype where the engine has it: NaN-checked then
  at::Tensor in = v.flat;
  const size_t n = v.count;
  std::vector<at::Tensor> outs;
  if (rank_ == root) {
    TORCH_CHECK(outputs.size() == 1 && int(outputs[0].size()) == size_,
                "ringguard: gather: the root needs one list of ", size_, " output tensors");
    outs = outputs[0];
    for (int p = 0; p < size_; ++p) {
      const at::Tensor& o = outs[size_t(p)];
      checkTensor("gather", o);
      checkWritable("gather", o);
      TORCH_CHECK(o.numel() == inputs[0].numel() && o.scalar_type() == inputs[0].scalar_type() &&
                      o.device() == inputs[0].device(),
                  "ringguard: gather: output ", describe(o), " of ", o.numel(),
                  " elements does not match the input ", describe(inputs[0]), " of ", inputs[0].numel());
    }
  } else {
    TORCH_CHECK(outputs.empty() || (outputs.size() == 1 && outputs[0].empty()),
                "ringguard: gather: only the root passes output tensors");
  }
  at::Tensor flat = at::empty({int64_t(rank_ == root ? n * size_t(size_) : 0)}, in.options());
  // A skipped collective (RINGGUARD_NAN_CHECK=skip) leaves the root's list as it was: `flat` starts as it.
  if (options_.nanCheck == NanCheck::kSkip) {
    for (size_t p = 0; p < outs.size(); ++p)
      flat.narrow(0, int64_t(p * n), int64_t(n)).copy_(copyViewOf(outs[p]).flat);
  }
  auto after = [outs, flat, n]() {
    for (size_t p = 0; p < outs.size(); ++p) copyInto(outs[p], flat.narrow(0, int64_t(p * n), int64_t(n)));
  };
  return launchGather("gather", in, flat, root, outs, after, /*nestedOutputs=*/true, v.dtype);
} catch (...) {
  rejected(CollectiveKind::kAlltoall, firstOf(inputs));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRingguard::gatherSingle(at::Tensor& output, at::Tensor& input,
                                                                   const c10d::GatherOptions& opts) try {
  const RejectionScope scope;
  const char* name = "gather_single";
  checkTensor(name, input);
  const int root = int(opts.rootRank);
  TORCH_CHECK(root >= 0 && root < size_, "ringguard: ", name, ": root rank ", root, " is outside [0, ", size_,
              ")");
  const CopyView v = copyViewOf(input);
  at::Tensor in = v.flat;
  at::Tensor out = at::empty({0}, in.options());
  std::vector<at::Tensor> outputs;
  ContiguousOutputs dense(name);
  if (rank_ == root) {
    checkTensor(name, output);
    TORCH_CHECK(output.numel() == input.numel() * size_ && output.scalar_type() == input.scalar_type() &&
                    output.device() == input.device(),
                "ringguard: ", name, ": output ", describe(output), " of ", output.numel(),
                " elements must hold ", size_, " x the input ", describe(input), " of ", input.numel());
    out = copyViewOf(dense(output)).flat;
    outputs.push_back(output);
    // The exchange is not in place: an input inside the output (the root's own block, say) is copied first.
    const auto* i0 = static_cast<const uint8_t*>(in.data_ptr());
    const auto* o0 = static_cast<const uint8_t*>(out.data_ptr());
    const int64_t inBytes = in.numel() * int64_t(in.element_size()),
                  outBytes = out.numel() * int64_t(out.element_size());
    if (inBytes > 0 && i0 < o0 + outBytes && o0 < i0 + inBytes) in = in.clone();
  }
  return launchGather(name, in, out, root, outputs, dense.after(), /*nestedOutputs=*/false, v.dtype);
} catch (...) {
  rejected(CollectiveKind::kAlltoall, input);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRingguard::scatter(std::vector<at::Tensor>& outputs,
                                                              std::vector<std::vector<at::Tensor>>& inputs,
                                                              const c10d::ScatterOptions& opts) try {
  const RejectionScope scope;
  checkSingle("scatter", outputs);
  const int root = int(opts.rootRank);
  TORCH_CHECK(root >= 0 && root < size_, "ringguard: scatter: root rank ", root, " is outside [0, ", size_,
              ")");
  ContiguousOutputs dense("scatter");
  const CopyView v =
      copyViewOf(dense(outputs[0]));  // the root's blocks as this dtype: NaN-checked where floating
  at::Tensor out = v.flat;
  const size_t n = v.count;
  std::vector<size_t> sc(size_t(size_), 0), sd(size_t(size_), 0), rc(size_t(size_), 0), rd(size_t(size_), 0);
  rc[size_t(root)] = n;
  at::Tensor flat = at::empty({0}, out.options());
  if (rank_ == root) {
    TORCH_CHECK(inputs.size() == 1 && int(inputs[0].size()) == size_,
                "ringguard: scatter: the root needs one list of ", size_, " input tensors");
    std::vector<at::Tensor> blocks;
    for (int p = 0; p < size_; ++p) {
      const at::Tensor& i = inputs[0][size_t(p)];
      checkTensor("scatter", i);
      TORCH_CHECK(i.numel() == outputs[0].numel() && i.scalar_type() == outputs[0].scalar_type() &&
                      i.device() == outputs[0].device(),
                  "ringguard: scatter: input ", describe(i), " of ", i.numel(),
                  " elements does not match the output ", describe(outputs[0]), " of ", outputs[0].numel());
      blocks.push_back(copyViewOf(i).flat);
      sc[size_t(p)] = n;
      sd[size_t(p)] = size_t(p) * n;
    }
    flat = at::cat(blocks);
  } else {
    TORCH_CHECK(inputs.empty() || (inputs.size() == 1 && inputs[0].empty()),
                "ringguard: scatter: only the root passes input tensors");
  }
  const DataType dt = v.dtype;
  return launch("scatter", out,
                [flat, out, sc, sd, rc, rd, dt](Communicator* comm, void* stream) {
                  return comm->alltoallAsync(flat.data_ptr(), sc, sd, out.data_ptr(), rc, rd, dt, stream);
                },
                outputs, dense.after(), /*nestedOutputs=*/false, {flat});
} catch (...) {
  rejected(CollectiveKind::kAlltoall, firstOf(outputs));
}

#define RINGGUARD_UNSUPPORTED(signature, opname, what) \
  c10::intrusive_ptr<c10d::Work> ProcessGroupRingguard::signature { unsupported(opname, what); }

RINGGUARD_UNSUPPORTED(allreduce_sparse(std::vector<at::Tensor>& t, const c10d::AllreduceOptions&),
                      "allreduce_sparse", firstTensor(t))
#undef RINGGUARD_UNSUPPORTED

// A receive from any source: PeerLanes::recvAny's matching rule (runtime/peer_lanes.h, docs/TORCH.md); the
// Work's sourceRank() is the rank the message came from.
c10::intrusive_ptr<c10d::Work> ProcessGroupRingguard::recvAnysource(std::vector<at::Tensor>& tensors,
                                                                    int tag) {
  checkSingle("recv", tensors);
  return p2p("recv", tensors[0], kAnySource, tag, /*isSend=*/false);
}

// send/recv: the engine's verified point-to-point (PeerLanes, sendRecv), the tensor as its dtype (bytes where
// the engine has none). CUDA tensors are staged through host memory.
c10::intrusive_ptr<c10d::Work> ProcessGroupRingguard::p2p(const char* op, at::Tensor& t, int peer, int tag,
                                                          bool isSend) {
  const bool any = peer == kAnySource && !isSend;
  TORCH_CHECK(any || (peer >= 0 && peer < size_ && peer != rank_), "ringguard: ", op, ": peer rank ", peer,
              " must be another rank in [0, ", size_, ")");
  TORCH_CHECK(!any || size_ > 1, "ringguard: recv without a source on rank ", rank_,
              ": the group has no other rank to receive from");
  TORCH_CHECK(tag >= 0, "ringguard: ", op, ": tag ", tag, " must be non-negative");
  {
    std::lock_guard<std::mutex> lock(mutex_);
    TORCH_CHECK(!stopped_, "ringguard: ", op, " after ", stoppedBy_);
  }
  std::vector<c10::Device> devices;
  int device = -1;
  void* stream = nullptr;
#if RINGGUARD_TORCH_CUDA
  if (t.is_cuda()) {
    devices.push_back(t.device());
    device = t.device().index();
    stream = c10::cuda::getCurrentCUDAStream(device).stream();
  }
#endif
  // Host memory the message moves through, contiguous: the tensor itself, or a copy (made on the caller's
  // stream for CUDA) that a receive copies into the tensor.
  if (!isSend) checkWritable(op, t);
  const bool copied = t.is_cuda() || !t.is_contiguous();
  at::Tensor host = !copied  ? t
                    : isSend ? t.to(at::kCPU).contiguous()
                             : at::empty(t.sizes(), t.options().device(at::kCPU));
  auto future =
      c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()), devices);
  auto rg = c10::make_intrusive<RgWork>(rank_, isSend ? c10d::OpType::SEND : c10d::OpType::RECV, op,
                                        std::vector<at::Tensor>{t}, future);
  auto done = [rg, future, t, host, device, stream, isSend, copied](const Status& st, int source) mutable {
    // PeerLanes runs this on its thread and destroys it later: what it holds is released here, inside
    // the window, since after complete() the caller may return and the interpreter finalise (completion.h).
    const ExitWindow window;
    std::exception_ptr error;
    if (!st.isOk()) error = toException(st);
    try {
#if RINGGUARD_TORCH_CUDA
      std::optional<c10::cuda::CUDAStreamGuard> guard;
      if (device >= 0) {
        guard.emplace(
            c10::cuda::getStreamFromExternal(static_cast<cudaStream_t>(stream), c10::DeviceIndex(device)));
      }
#endif
      if (!error && source >= 0) rg->setSourceRank(source);  // before the Work completes: wait() reads it
      if (!error && !isSend && copied) {
        const at::NoGradGuard noGrad;  // as the collectives' copy-outs (completion.cc)
        t.copy_(host, /*non_blocking=*/false);
      }
      if (error) {
        future->setError(error);
      } else {
        future->markCompleted(c10::IValue(std::vector<at::Tensor>{t}));
      }
    } catch (...) {
      if (!error) error = currentException();
      if (!future->completed()) future->setError(error);
    }
    rg->complete(error);
    auto held = std::make_tuple(std::move(rg), std::move(future), std::move(t), std::move(host));
    if (!window.open()) keepForExit(std::move(held));  // the interpreter is exiting: see completion.h
  };
  // As its dtype where the engine has one, so that the fingerprint compares dtypes as well as sizes (a
  // receive of another dtype of the same bytes fails both sides); else as bytes.
  DataType dt = DataType::kUint8;
  size_t count = size_t(host.numel()) * host.element_size();
  if (toDataType(host.scalar_type(), &dt)) {
    count = size_t(host.numel());
  } else {
    dt = DataType::kUint8;
  }
  if (any) {
    p2p_->recvAny(tag, host.data_ptr(), count, dt, std::move(done));
  } else if (isSend) {
    p2p_->send(peer, tag, host.data_ptr(), count, dt, [done](const Status& st) mutable { done(st, -1); });
  } else {
    p2p_->recv(peer, tag, host.data_ptr(), count, dt,
               [done, peer](const Status& st) mutable { done(st, peer); });
  }
  coalesce(rg);
  return rg;
}

at::Tensor ProcessGroupRingguard::premulOnOneRank(const at::Tensor& t, ReduceOp* op, bool inPlace) const {
  if (size_ != 1 || !isPremulSum(*op)) return t;
  // The factor as a scalar of the tensor's (real) dtype, as ProcessGroupNCCL makes it and the engine rounds
  // it; the product is computed as at::mul computes it (f16/bf16 in f32, rounded once), which is the
  // engine's arithmetic for one input. A CPU scalar also for a CUDA tensor (a kernel argument, no copy);
  // the multiply runs on the caller's stream, which the collective is ordered after.
  at::Tensor out = inPlace ? t : t.clone();
  at::Tensor real = out.is_complex() ? at::view_as_real(out) : out;
  real.mul_(at::scalar_tensor(premulFactor(*op), real.options().device(at::kCPU)));
  *op = ReduceOp::kSum;
  return out;
}

void ProcessGroupRingguard::coalesce(const c10::intrusive_ptr<c10d::Work>& work) {
  std::lock_guard<std::mutex> lock(coalescingMutex_);
  if (coalescing_) coalesced_.push_back(work);
}

void ProcessGroupRingguard::startCoalescing() {
  std::lock_guard<std::mutex> lock(coalescingMutex_);
  // A block that ended in an exception never reached endCoalescing (as with NCCL): start afresh.
  coalesced_.clear();
  coalescing_ = true;
}

// One Work over the block's operations: its Future completes (with every output) once each of theirs has,
// with the first error if any failed; then the Work. Each operation's own completion runs the countdown, so
// nothing waits on a thread of its own.
c10::intrusive_ptr<c10d::Work> ProcessGroupRingguard::endCoalescing() {
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  {
    std::lock_guard<std::mutex> lock(coalescingMutex_);
    TORCH_CHECK(coalescing_, "ringguard: endCoalescing without startCoalescing");
    coalescing_ = false;
    works.swap(coalesced_);
  }
  if (works.empty()) return nullptr;
  std::vector<at::Tensor> outputs;
  std::vector<c10::Device> devices;
  std::vector<c10::intrusive_ptr<c10::ivalue::Future>> futures;
  for (const auto& w : works) {
    for (const at::Tensor& t : w->result()) outputs.push_back(t);
    futures.push_back(w->getFuture());
    for (const c10::Device& d : futures.back()->devices()) {
      if (std::find(devices.begin(), devices.end(), d) == devices.end()) devices.push_back(d);
    }
  }
  auto future =
      c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()), devices);
  auto all = c10::make_intrusive<RgWork>(rank_, c10d::OpType::COALESCED, "coalesced", outputs, future);
  struct Countdown {
    std::mutex mutex;
    size_t left;
    std::exception_ptr error;
  };
  auto state = std::make_shared<Countdown>();
  state->left = futures.size();
  for (const auto& f : futures) {
    f->addCallback([state, all, future, outputs](c10::ivalue::Future& done) {
      std::exception_ptr error;
      {
        std::lock_guard<std::mutex> lock(state->mutex);
        if (done.hasError() && !state->error) state->error = done.exception_ptr();
        if (--state->left > 0) return;
        error = state->error;
      }
      if (error) {
        future->setError(error);
      } else {
        future->markCompleted(c10::IValue(outputs));
      }
      all->complete(error);
    });
  }
  return all;
}

// Every rank issues the same collectives in the same order, so a count of them agrees across the group
// (what TORCH_DISTRIBUTED_DEBUG=DETAIL compares).
void ProcessGroupRingguard::setSequenceNumberForGroup() { sequence_ = 0; }
uint64_t ProcessGroupRingguard::getSequenceNumberForGroup() { return sequence_; }

c10::intrusive_ptr<c10d::Work> ProcessGroupRingguard::send(std::vector<at::Tensor>& tensors, int dstRank,
                                                           int tag) {
  checkSingle("send", tensors);
  return p2p("send", tensors[0], dstRank, tag, /*isSend=*/true);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRingguard::recv(std::vector<at::Tensor>& tensors, int srcRank,
                                                           int tag) {
  checkSingle("recv", tensors);
  return p2p("recv", tensors[0], srcRank, tag, /*isSend=*/false);
}

void ProcessGroupRingguard::stop(bool abort) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopped_) return;
    stopped_ = true;
    stoppedBy_ = abort ? "abort()" : "shutdown()";
    // abort(): what is queued fails and the collective in progress returns at its next wait (kAborted);
    // the peers are told. shutdown(): everything issued still runs.
    if (abort) {
      for (Communicator* c : {cpu_.get(), cuda_.get()}) {
        if (c != nullptr) c->abort("abort() of the process group");
      }
      if (p2p_) p2p_->abort("abort() of the process group");
    }
  }
  // The lanes complete what was issued (after abort() at once; else each collective ends, at worst, at its
  // timeout).
  if (cpuLane_) cpuLane_->drain(stoppedBy_);
  if (cudaLane_) cudaLane_->drain(stoppedBy_);
  // A clean end waits (at most 10 s per transport) for every peer's goodbye. After a failure anywhere in the
  // group a peer may never send one (it stopped, or hangs in the collective that failed here), and
  // destroy_process_group would wait it out: then no transport of the group waits. Nothing is announced (an
  // abort's error frame would fail a peer still completing a collective this rank completed).
  const bool failed = anyFailed();
  if (failed && p2p_) p2p_->peersMayBeGone();
  // The communicators tell their peers first: each transport's destructor waits (bounded) for the peers'
  // goodbyes, and a peer still waiting for this rank on a later one would otherwise learn it only after the
  // earlier ones' waits. The lanes' transport goes first anyway, after its threads (which may still be
  // announcing a failure to the peers: a goodbye must be the last frame) have ended.
  for (Communicator* c : {cuda_.get(), cpu_.get()}) {
    if (c != nullptr) c->leave(/*peersMayBeGone=*/failed);
  }
  p2p_.reset();
  cuda_.reset();  // each transport says goodbye to its peers, so no Gloo work is left pending
  cpu_.reset();
  gloo_.reset();  // the last reference: Gloo's context and its threads go
  store_.reset();
}

bool ProcessGroupRingguard::anyFailed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  for (Communicator* c : {cpu_.get(), cuda_.get()}) {
    if (c != nullptr && !c->firstError().isOk()) return true;
  }
  return p2p_ && !p2p_->firstError().isOk();
}

void ProcessGroupRingguard::shutdown() { stop(/*abort=*/false); }
void ProcessGroupRingguard::abort() { stop(/*abort=*/true); }

Counters ProcessGroupRingguard::counters() const {
  std::lock_guard<std::mutex> lock(mutex_);
  Counters c;
  if (cpu_) c += cpu_->counters();
  if (cuda_) c += cuda_->counters();
  if (p2p_) c += p2p_->counters();
  return c;
}

void ProcessGroupRingguard::setFault(const std::map<std::string, std::string>& fault) {
  if (Status nul = checkSettingMap(fault); !nul.isOk())
    throw std::invalid_argument("ringguard: set_fault: " + nul.message());
  for (const auto& kv : fault) {
    if (kv.first.rfind("RINGGUARD_FAULT_", 0) != 0) {
      throw std::invalid_argument("ringguard: set_fault: '" + kv.first +
                                  "' is not a RINGGUARD_FAULT_* option");
    }
  }
  // Fault options not named keep their defaults: set_fault replaces the whole setting.
  ringguard::Options o;
  Status st = ringguard::Options::fromLookup(
      [&fault](const char* name) -> const char* {
        auto it = fault.find(name);
        return it != fault.end() ? it->second.c_str() : nullptr;
      },
      &o);
  if (!st.isOk()) throw std::invalid_argument("ringguard: set_fault: " + st.message());
  std::lock_guard<std::mutex> lock(mutex_);
  fault_ = o.fault;
  if (p2p_) {
    st = p2p_->setFault(fault_);
    if (!st.isOk()) throw std::invalid_argument("ringguard: set_fault: " + st.message());
  }
  for (Communicator* c : {cpu_.get(), cuda_.get()}) {
    if (!c) continue;
    st = c->setFault(fault_);
    if (!st.isOk()) throw std::invalid_argument("ringguard: set_fault: " + st.message());
  }
}

std::map<std::string, std::string> ProcessGroupRingguard::fault() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::map<std::string, std::string> m;
  m["RINGGUARD_FAULT_MODE"] = faultModeName(fault_.mode);
  std::ostringstream p;
  p << fault_.probability;
  m["RINGGUARD_FAULT_PROB"] = p.str();
  std::string schedule;
  for (const auto& e : fault_.schedule) {
    if (!schedule.empty()) schedule += ",";
    schedule += std::to_string(e.collective) + ":" + std::to_string(e.step) + ":" + std::to_string(e.slice) +
                ":" + std::to_string(e.rank);
  }
  m["RINGGUARD_FAULT_SCHEDULE"] = schedule;
  m["RINGGUARD_FAULT_SEED"] = std::to_string(fault_.seed);
  m["RINGGUARD_FAULT_BITS"] = std::to_string(fault_.bits);
  m["RINGGUARD_FAULT_BURST_BITS"] = std::to_string(fault_.burstBits);
  m["RINGGUARD_FAULT_DELAY_MS"] = std::to_string(fault_.delayMs);
  m["RINGGUARD_FAULT_REPEAT"] = std::to_string(fault_.repeat);
  return m;
}

std::string ProcessGroupRingguard::transport(const std::string& deviceType) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (deviceType == "cpu" && cpu_) return cpu_->transportName();
  if (deviceType == "cuda" && cuda_) return cuda_->transportName();
  return "";
}

}  // namespace ringguard
