// bench_graph_guard: the guard's CUDA-graph path (GraphGuard: detect -> restore -> replay on the device)
// against the host-driven Guard (immediate mode: one host wait per call) and against the floor every guard
// pays (the op + a D2D copy of its state + a NaN scan of its output), same op, same run.
//
//   bench_graph_guard [-b 64K] [-e 64M] [-f 4] [-n 200]
//
// The op: y = max(0, 2 x + acc), acc += 1 over `bytes` of f32 (state acc, output y). Per size, each form runs
// -n calls back to back on one stream; the figure is the time of all of them (cudaEvent) / n. Rows:
//   op            the op alone
//   floor         op + cudaMemcpyAsync D2D of acc + nanScanDevice of y (no decision)
//   guard_imm     Guard::run, immediate mode, device backend (snapshot, op, scan, host wait, per call)
//   graph         GraphGuard::launch (no host wait; one report after the -n calls)
//   graph_replay  GraphGuard with a NaN injected into every call's first run: one on-device replay per call
// and ends with `summary: bytes=<B> graph_over_floor=<r> guard_imm_over_floor=<r>` at the largest size.
//
// Then the batched snapshot: Guard::run (immediate) of an op whose state is --tensors tensors of
// --tensor-bytes each (a layer's parameters and optimizer slots), the device backend's snapshots batched into
// one cudaMemcpyBatchAsync against one cudaMemcpyAsync (and two events) per tensor: `snapshot_batch:
// tensors=<T> bytes=<B> batched_ms=<t> per_tensor_ms=<t> speedup=<r>`.
#include <cuda_runtime.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "../bench_sizes.h"
#include "bench_cuda_check.h"
#include "cuda/kernels.h"
#include "ringguard/guard/device_backend.h"
#include "ringguard/guard/graph_guard.h"
#include "ringguard/guard/guard.h"

namespace {

using namespace ringguard;

__global__ void reluAxpyKernel(float* y, float* acc, const float* x, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    y[i] = fmaxf(0.0f, 2.0f * x[i] + acc[i]);
    acc[i] += 1.0f;
  }
}

void launchOp(float* y, float* acc, const float* x, size_t n, cudaStream_t s) {
  const size_t blocks = (n + 255) / 256;
  reluAxpyKernel<<<unsigned(blocks < 4096 ? blocks : 4096), 256, 0, s>>>(y, acc, x, n);
}

// Milliseconds per call of `calls` back-to-back calls of `one` on `s` (after 3 warm-up calls).
double perCall(cudaStream_t s, int calls, const std::function<void()>& one) {
  for (int i = 0; i < 3; ++i) one();
  CHECK_CUDA(cudaStreamSynchronize(s));
  cudaEvent_t a, b;
  CHECK_CUDA(cudaEventCreate(&a));
  CHECK_CUDA(cudaEventCreate(&b));
  CHECK_CUDA(cudaEventRecord(a, s));
  for (int i = 0; i < calls; ++i) one();
  CHECK_CUDA(cudaEventRecord(b, s));
  CHECK_CUDA(cudaEventSynchronize(b));
  float ms = 0;
  CHECK_CUDA(cudaEventElapsedTime(&ms, a, b));
  CHECK_CUDA(cudaEventDestroy(a));
  CHECK_CUDA(cudaEventDestroy(b));
  return double(ms) / calls;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"GraphGuard against the host-driven guard and the copy + scan floor"};
  std::string minS = "64K", maxS = "64M";
  int factor = 4, calls = 200, tensors = 128;
  std::string tensorBytesS = "4K";
  app.add_option("-b", minS, "smallest size (bytes of the state and of the output)");
  app.add_option("-e", maxS, "largest size");
  app.add_option("-f", factor, "size factor");
  app.add_option("-n", calls, "calls per form and size");
  app.add_option("--tensors", tensors, "state tensors of the batched-snapshot comparison");
  app.add_option("--tensor-bytes", tensorBytesS, "bytes of each of them");
  CLI11_PARSE(app, argc, argv);
  size_t lo = 0, hi = 0, tb = 0;
  try {
    lo = bench::parseBytes("-b", minS);
    hi = bench::parseBytes("-e", maxS);
    tb = bench::parseBytes("--tensor-bytes", tensorBytesS);
  } catch (const CLI::Error& e) {
    return app.exit(e);
  }

  CHECK_CUDA(cudaSetDevice(0));
  cudaStream_t s;
  CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  float *x, *acc, *y, *copy;
  CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&x), hi));
  CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&acc), hi));
  CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&y), hi));
  CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&copy), hi));
  CHECK_CUDA(cudaMemset(x, 0, hi));
  CHECK_CUDA(cudaMemset(acc, 0, hi));
  NanScanResult* result;
  CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&result), sizeof(NanScanResult)));

  std::printf("# bench_graph_guard: calls=%d per form and size; ms per call\n", calls);
  std::printf("%12s %10s %10s %10s %10s %12s %12s %12s\n", "bytes", "op", "floor", "guard_imm", "graph",
              "graph_replay", "graph/floor", "imm/floor");
  double lastGraph = 0, lastImm = 0, lastFloor = 0;
  size_t lastBytes = 0;
  for (size_t bytes = lo; bytes <= hi; bytes *= size_t(factor)) {
    const size_t n = bytes / sizeof(float);
    const double op = perCall(s, calls, [&] { launchOp(y, acc, x, n, s); });
    const double floor = perCall(s, calls, [&] {
      CHECK_CUDA(cudaMemcpyAsync(copy, acc, bytes, cudaMemcpyDeviceToDevice, s));
      launchOp(y, acc, x, n, s);
      CHECK_OK(nanScanDevice(y, n, DataType::kFloat32, result, s));
    });

    std::unique_ptr<GuardBackend> device;
    DeviceGuardBackendOptions dopt;
    CHECK_OK(makeDeviceGuardBackend(dopt, &device));
    Guard guard(GuardPolicy{}, makeHostGuardBackend(), std::move(device));
    GuardedOp gop;
    gop.name = "relu_axpy";
    gop.state = {GuardBuffer{"acc", acc, bytes, DataType::kFloat32, MemoryKind::kDevice}};
    gop.outputs = {GuardBuffer{"y", y, bytes, DataType::kFloat32, MemoryKind::kDevice}};
    gop.stream = s;
    gop.body = [&] {
      launchOp(y, acc, x, n, s);
      return Status::ok();
    };
    const double imm = perCall(s, calls, [&] { CHECK_OK(guard.run(gop)); });

    GraphGuardedOp g;
    g.name = "relu_axpy";
    g.state = gop.state;
    g.outputs = gop.outputs;
    g.body = [&](void* stream) {
      launchOp(y, acc, x, n, static_cast<cudaStream_t>(stream));
      return Status::ok();
    };
    std::unique_ptr<GraphGuard> graph, replaying;
    CHECK_OK(GraphGuard::create(0, g, GraphGuardOptions{}, &graph));
    const double gr = perCall(s, calls, [&] { CHECK_OK(graph->launch(s)); });
    GraphGuardReport rep;
    CHECK_OK(graph->report(&rep));
    if (!rep.clean || rep.replays != 0) std::fprintf(stderr, "unexpected: clean graph replayed\n");
    GraphGuardOptions faulty;
    faulty.faults = {GraphFault{0, n / 2, FaultValue::kNaN, 0x1}};
    CHECK_OK(GraphGuard::create(0, g, faulty, &replaying));
    const double grr = perCall(s, calls, [&] { CHECK_OK(replaying->launch(s)); });
    CHECK_OK(replaying->report(&rep));
    if (!rep.clean || rep.replays != 1)
      std::fprintf(stderr, "unexpected: a transient fault did not replay once\n");

    std::printf("%12zu %10.4f %10.4f %10.4f %10.4f %12.4f %12.3f %12.3f\n", bytes, op, floor, imm, gr, grr,
                gr / floor, imm / floor);
    lastGraph = gr;
    lastImm = imm;
    lastFloor = floor;
    lastBytes = bytes;
  }
  std::printf("summary: bytes=%zu graph_over_floor=%.3f guard_imm_over_floor=%.3f\n", lastBytes,
              lastGraph / lastFloor, lastImm / lastFloor);

  // The batched snapshot.
  std::vector<void*> state(static_cast<size_t>(tensors), nullptr);
  for (void*& p : state) CHECK_CUDA(cudaMalloc(&p, tb));
  GuardedOp many;
  many.name = "many";
  for (int t = 0; t < tensors; ++t) {
    many.state.push_back(GuardBuffer{"s", state[size_t(t)], tb, DataType::kFloat32, MemoryKind::kDevice});
  }
  many.outputs = {GuardBuffer{"y", y, 4096, DataType::kFloat32, MemoryKind::kDevice}};
  many.stream = s;
  many.body = [&] {
    launchOp(y, acc, x, 1024, s);
    return Status::ok();
  };
  double ms[2] = {0, 0};
  for (int batched = 0; batched < 2; ++batched) {
    std::unique_ptr<GuardBackend> device;
    DeviceGuardBackendOptions dopt;
    dopt.batchSnapshots = batched == 1;
    CHECK_OK(makeDeviceGuardBackend(dopt, &device));
    Guard guard(GuardPolicy{}, makeHostGuardBackend(), std::move(device));
    ms[batched] = perCall(s, calls, [&] { CHECK_OK(guard.run(many)); });
  }
  std::printf("snapshot_batch: tensors=%d bytes=%zu batched_ms=%.4f per_tensor_ms=%.4f speedup=%.2f\n",
              tensors, tb, ms[1], ms[0], ms[0] / ms[1]);
  for (void* p : state) CHECK_CUDA(cudaFree(p));
  return 0;
}
