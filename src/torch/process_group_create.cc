// ProcessGroupRingguard's creation and end: its options, the choice of bootstrap for its CPU communicator
// (made by the bootstrap layer: ringguard/bootstrap/host_bootstrap.h), its CUDA communicator on first use,
// its point-to-point lanes, and stop() for shutdown() and abort().
#include <c10/util/Exception.h>

#include <cstring>
#include <set>
#include <stdexcept>
#include <utility>

#include "core/env.h"
#include "ringguard/bootstrap/host_bootstrap.h"
#include "ringguard/runtime/device_stager.h"  // the staged collectives' stager, released with the group
#include "ringguard/runtime/factories.h"
#include "ringguard/runtime/point_to_point.h"
#include "ringguard/torch/process_group.h"
#include "torch/completion.h"
#include "torch/store_bootstrap.h"
#include "torch/tensor_checks.h"
#if RINGGUARD_TORCH_MPI
#include "ringguard/mpi/group_bootstrap.h"
#endif
#if RINGGUARD_TORCH_CUDA
#include <c10/cuda/CUDAGuard.h>

#include "ringguard/runtime/device_factory.h"
#endif

namespace ringguard {

namespace {

// Tag bases on the Gloo backend: one range per communicator (C10dTransport uses 3 tags from its base).
constexpr int kCpuTagBase = 1;
constexpr int kCudaTagBase = 8;
constexpr int kP2pTagBase = 16;  // send/recv's lanes (ringguard/runtime/point_to_point.h)

#if RINGGUARD_TORCH_MPI
constexpr bool kHaveMpi = true;
#else
constexpr bool kHaveMpi = false;
#endif

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
  createCpuCommunicator(globalRanks);
  // send/recv: the engine's verified point-to-point, one lane per (peer, direction), over a c10d transport
  // of their own on the same Gloo backend, through shared memory as the CPU communicator's when the ranks
  // share a host (RINGGUARD_CPU_TRANSPORT; under mpirun, where that says mpi, as auto).
  // The lanes move send/recv only, which the shared-memory windows do not carry (docs/design/protocol.md):
  // their segments hold none.
  StoreBootstrap p2pStore(store_, gloo_, "ringguard/p2p", kP2pTagBase);
  const SettingLookup lanes = [all = lookup()](const char* name) -> const char* {
    return std::strcmp(name, "RINGGUARD_SHM_WINDOW_BYTES") == 0 ? "0" : all(name);
  };
  st = createPointToPoint(*withSharedMemory(p2pStore, lanes, "gloo", options_.timeout), options_, &p2p_);
  TORCH_CHECK(st.isOk(), "ringguard: send/recv transport: ", st.toString());
  cpuLane_ = std::make_unique<CompletionLane>("rg-done-cpu");
  cudaLane_ = std::make_unique<CompletionLane>("rg-done-cuda");
  init();
}

ProcessGroupRingguard::~ProcessGroupRingguard() { stop(/*abort=*/false); }

// A RINGGUARD_* setting: this group's pg_options first, then the environment (nullptr: unset).
const char* ProcessGroupRingguard::option(const char* name) const {
  auto it = optionMap_.find(name);
  return it != optionMap_.end() ? it->second.c_str() : envLookup(name);
}

SettingLookup ProcessGroupRingguard::lookup() const {
  return [this](const char* name) { return option(name); };
}

// MPI when mpirun started us (or RINGGUARD_CPU_TRANSPORT=mpi), else the Store: the bootstrap layer's choice,
// after the ranks agreed on RINGGUARD_CPU_TRANSPORT under mpirun (its two setups would wait for each other).
void ProcessGroupRingguard::createCpuCommunicator(const std::vector<int>& globalRanks) {
  const bool underMpirun = startedByMpirun();
  Status st;
  if (underMpirun) {
    StoreBootstrap exchange(store_, gloo_, "ringguard/cpu_transport", kCpuTagBase);
    st = agreeOnCpuTransport(exchange, lookup());
    if (st.code() == StatusCode::kInvalidArgument) throw std::invalid_argument("ringguard: " + st.message());
    TORCH_CHECK(st.isOk(), "ringguard: ", st.message());
  }
  HostBootstrapKind kind = HostBootstrapKind::kStore;
  st = chooseHostBootstrap(lookup(), underMpirun, kHaveMpi, &kind);
  TORCH_CHECK(st.isOk(), "ringguard: ", st.message());
  if (kind == HostBootstrapKind::kMpi) {
#if RINGGUARD_TORCH_MPI
    // MPI over exactly this group's ranks: collective over the members only, as the creator is
    // (non-members of a new_group never get here). auto: MPI under shared memory when the ranks share a
    // host (as for a C++ job under mpirun); mpi: MPI alone.
    std::unique_ptr<Bootstrap> bootstrap;
    st = mpi::createHostGroupBootstrap(globalRanks, rank_, size_, lookup(), options_.timeout, &bootstrap);
    if (st.isOk()) st = createHostCommunicator(*bootstrap, options_, &cpu_);
    TORCH_CHECK(st.isOk(), "ringguard: CPU communicator over MPI: ", st.toString());
    return;
#endif
  }
  (void)globalRanks;
  // RINGGUARD_CPU_TRANSPORT without MPI: auto tries shared memory, shm insists on it, gloo keeps the Gloo
  // helper. A value that does not parse is published in the setup's first exchange, so every rank fails
  // with it instead of waiting for this one.
  StoreBootstrap store(store_, gloo_, "ringguard/cpu", kCpuTagBase);
  st = createHostCommunicator(*withSharedMemory(store, lookup(), "gloo", options_.timeout), options_, &cpu_);
  TORCH_CHECK(st.isOk(), "ringguard: ", st.toString());
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

void ProcessGroupRingguard::abortWith(const std::string& why) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (Communicator* c : {cpu_.get(), cuda_.get()}) {
    if (c != nullptr) c->abort(why);
  }
  if (p2p_) p2p_->abort(why);
}

void ProcessGroupRingguard::stop(bool abort) {
  endDeviceP2p(abort);  // while the group still issues
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
  {
    // A replica check's all-gather on cpu_ or cuda_ outside the lanes (allgatherHostWords,
    // allgatherDeviceWords): returned at once after abort(), else when it completes.
    std::unique_lock<std::mutex> lock(mutex_);
    wordsDone_.wait(lock, [this] { return wordsInFlight_ == 0; });
  }
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

}  // namespace ringguard
