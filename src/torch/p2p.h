#pragma once
// Verified point-to-point send/recv for the c10d backend, over the same Gloo backend as the collectives
// (tags 16-18, after the communicators' ranges). Each message carries a header with its size, the user's
// tag, the attempt and the CRC-32 of the payload; the receiver checks it and answers with a verdict, and a
// corrupted message is sent again from the sender's retained bytes, up to maxRetries times (then both
// sides fail with a Corruption error). One worker thread per (peer, direction) runs that peer's sends (or
// receives) in issue order, so sends and receives never wait for each other (isend/irecv pairs between
// two ranks cannot deadlock) and messages of one (peer, direction) match in order, as in NCCL and MPI.
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <torch/csrc/distributed/c10d/Backend.hpp>

#include "ringguard/core/counters.h"
#include "ringguard/core/options.h"
#include "ringguard/core/status.h"

namespace ringguard {

class VerifiedP2p {
 public:
  VerifiedP2p(c10::intrusive_ptr<c10d::Backend> gloo, const Options& options);
  ~VerifiedP2p();  // runs what is queued, then joins the workers

  // `bytes` of host memory at `data` (valid until `done` runs). `done` runs on a worker thread with the
  // result.
  void send(int peer, int tag, const void* data, size_t bytes, std::function<void(const Status&)> done);
  void recv(int peer, int tag, void* data, size_t bytes, std::function<void(const Status&)> done);

  void setFault(const FaultOptions& fault);
  Counters counters() const;

 private:
  struct Op {
    int tag;
    void* data;
    size_t bytes;
    std::function<void(const Status&)> done;
  };
  struct Worker {
    std::mutex mutex;
    std::condition_variable cv;
    std::deque<Op> queue;
    bool stop = false;
    uint64_t messages = 0;  // per (peer, direction): the fault injector's sequence number
    std::thread thread;
  };

  void enqueue(int peer, bool isSend, Op op);
  void loop(int peer, bool isSend, Worker* w);
  Status runSend(int peer, Worker* w, const Op& op);
  Status runRecv(int peer, Worker* w, const Op& op);
  Status waitWork(const c10::intrusive_ptr<c10d::Work>& work, const char* what, int peer);

  c10::intrusive_ptr<c10d::Backend> gloo_;
  const Options options_;
  mutable std::mutex mutex_;  // guards workers_, fault_, counters_
  std::map<std::pair<int, bool>, std::unique_ptr<Worker>> workers_;
  FaultOptions fault_;
  Counters counters_;
};

}  // namespace ringguard
