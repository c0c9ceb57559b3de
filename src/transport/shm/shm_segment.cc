#include "transport/shm/shm_segment.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <mutex>
#include <random>
#include <sstream>

namespace ringguard {
namespace shm {

namespace {

constexpr uint64_t kMagic = 0x31534d4853475243ULL;  // "CRGSHMS1"

size_t roundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

// A segment holds one data ring and one control ring per peer: size - 1 of each.
size_t indexBytes(int size) { return sizeof(SegmentHeader) + 2 * sizeof(RingIndices) * size_t(size - 1); }

size_t layoutBytes(int size, size_t ringBytes, size_t controlRingBytes, size_t windowBytes) {
  return indexBytes(size) + (ringBytes + controlRingBytes) * size_t(size - 1) + windowBytes;
}

Status systemError(const std::string& what, int err) {
  return Status(StatusCode::kTransportError, what + ": " + std::strerror(err));
}

uint64_t randomBits() {
  std::random_device rd;
  return (uint64_t(rd()) << 32) ^ uint64_t(rd());
}

long futex(std::atomic<uint32_t>* word, int op, uint32_t value, const struct timespec* timeout) {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, timeout, nullptr, 0);
}

}  // namespace

void sweepStaleSegments(std::chrono::seconds olderThan) {
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return;
  const time_t now = time(nullptr);
  while (dirent* e = readdir(dir)) {
    long pid = 0;
    if (std::sscanf(e->d_name, "ringguard-%ld-", &pid) != 1 || pid <= 0) continue;
    if (kill(pid_t(pid), 0) == 0 || errno != ESRCH) continue;  // alive, or not ours to judge
    struct stat st;
    const std::string path = std::string("/dev/shm/") + e->d_name;
    if (stat(path.c_str(), &st) != 0 || now - st.st_mtime < olderThan.count()) continue;
    shm_unlink((std::string("/") + e->d_name).c_str());
  }
  closedir(dir);
}

Segment::Segment(std::string name, void* base, size_t bytes, bool owner, int rank, int size, size_t ringBytes,
                 size_t controlRingBytes, size_t windowBytes)
    : name_(std::move(name)),
      base_(base),
      bytes_(bytes),
      linked_(owner),
      rank_(rank),
      peers_(size - 1),
      ringBytes_(ringBytes),
      controlRingBytes_(controlRingBytes),
      windowBytes_(windowBytes),
      rings_(reinterpret_cast<RingIndices*>(static_cast<uint8_t*>(base) + sizeof(SegmentHeader))),
      data_(static_cast<uint8_t*>(base) + indexBytes(size)),
      control_(data_ + ringBytes * size_t(size - 1)) {}

Segment::~Segment() {
  unlink();
  munmap(base_, bytes_);
}

void Segment::unlink() {
  if (!linked_) return;
  linked_ = false;
  shm_unlink(name_.c_str());
}

Status Segment::create(int rank, int size, size_t ringBytes, size_t controlRingBytes, size_t windowBytes,
                       std::unique_ptr<Segment>* out) {
  static std::atomic<uint64_t> made{0};
  static std::once_flag swept;
  std::call_once(swept, [] { sweepStaleSegments(std::chrono::seconds(60)); });
  ringBytes = roundUp(ringBytes, 64);
  controlRingBytes = roundUp(controlRingBytes, 64);
  windowBytes = roundUp(windowBytes, 64);
  std::ostringstream name;
  name << "/ringguard-" << getpid() << "-" << made.fetch_add(1) << "-" << std::hex << randomBits();
  const size_t bytes = layoutBytes(size, ringBytes, controlRingBytes, windowBytes);
  const int fd = shm_open(name.str().c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) return systemError("shm_open " + name.str(), errno);
  // posix_fallocate reserves the pages: a /dev/shm too small fails here, not with SIGBUS at a later write.
  int err = ftruncate(fd, off_t(bytes)) == 0 ? posix_fallocate(fd, 0, off_t(bytes)) : errno;
  void* base = MAP_FAILED;
  if (err == 0) {
    base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) err = errno;
  }
  close(fd);
  if (err != 0) {
    shm_unlink(name.str().c_str());
    return systemError("reserving " + std::to_string(bytes) + " bytes of shared memory (" + name.str() + ")",
                       err);
  }
  std::memset(base, 0, indexBytes(size));
  auto* h = static_cast<SegmentHeader*>(base);
  h->nonce = randomBits();
  h->rank = rank;
  h->size = size;
  h->ringBytes = ringBytes;
  h->controlRingBytes = controlRingBytes;
  h->windowBytes = windowBytes;
  std::atomic_thread_fence(std::memory_order_release);
  h->magic = kMagic;
  out->reset(new Segment(name.str(), base, bytes, /*owner=*/true, rank, size, ringBytes, controlRingBytes,
                         windowBytes));
  return Status::ok();
}

Status Segment::open(const std::string& name, int rank, int size, uint64_t nonce,
                     std::unique_ptr<Segment>* out) {
  const int fd = shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) return systemError("shm_open " + name + " (rank " + std::to_string(rank) + "'s)", errno);
  struct stat st;
  if (fstat(fd, &st) != 0 || size_t(st.st_size) < sizeof(SegmentHeader)) {
    close(fd);
    return Status(StatusCode::kTransportError, "shared memory " + name + " is too small for a segment");
  }
  const size_t bytes = size_t(st.st_size);
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int err = errno;
  close(fd);
  if (base == MAP_FAILED) return systemError("mmap " + name, err);
  const auto* h = static_cast<const SegmentHeader*>(base);
  std::atomic_thread_fence(std::memory_order_acquire);
  std::string bad;
  if (h->magic != kMagic || h->nonce != nonce) {
    bad = "not the segment rank " + std::to_string(rank) + " made (another host's /dev/shm, or a stale name)";
  } else if (h->rank != rank || h->size != size) {
    bad = "made by rank " + std::to_string(h->rank) + " of " + std::to_string(h->size) + ", expected rank " +
          std::to_string(rank) + " of " + std::to_string(size);
  } else if (h->ringBytes == 0 || h->ringBytes % 64 != 0 || h->controlRingBytes == 0 ||
             h->controlRingBytes % 64 != 0 || h->windowBytes % 64 != 0 ||
             layoutBytes(size, h->ringBytes, h->controlRingBytes, h->windowBytes) != bytes) {
    bad = "its size (" + std::to_string(bytes) + " bytes) does not match its rings of " +
          std::to_string(h->ringBytes) + " and " + std::to_string(h->controlRingBytes) + " bytes and its " +
          std::to_string(h->windowBytes) + "-byte window";
  }
  if (!bad.empty()) {
    munmap(base, bytes);
    return Status(StatusCode::kTransportError, "shared memory " + name + ": " + bad);
  }
  out->reset(new Segment(name, base, bytes, /*owner=*/false, rank, size, size_t(h->ringBytes),
                         size_t(h->controlRingBytes), size_t(h->windowBytes)));
  return Status::ok();
}

void Segment::raise() {
  SegmentHeader* h = header();
  h->doorbell.fetch_add(1, std::memory_order_seq_cst);
  if (h->sleepers.load(std::memory_order_seq_cst) > 0) futex(&h->doorbell, FUTEX_WAKE, INT_MAX, nullptr);
}

void Segment::wait(uint32_t seen, std::chrono::microseconds max) {
  SegmentHeader* h = header();
  h->sleepers.fetch_add(1, std::memory_order_seq_cst);
  if (h->doorbell.load(std::memory_order_seq_cst) == seen) {
    struct timespec ts;
    ts.tv_sec = time_t(max.count() / 1000000);
    ts.tv_nsec = long(max.count() % 1000000) * 1000;
    futex(&h->doorbell, FUTEX_WAIT, seen, &ts);  // returns at a wake, a changed word, the timeout or a signal
  }
  h->sleepers.fetch_sub(1, std::memory_order_seq_cst);
}

}  // namespace shm
}  // namespace ringguard
