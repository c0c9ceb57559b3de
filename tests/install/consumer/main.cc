// Consumer of the installed ringguard package (ctest: install_consumer). MPI-free on purpose: it only
// needs the headers and ringguard::ringguard to resolve, link and run: the API headers (communicator,
// options, logging, observability) compile without spdlog, MPI or any private header.
#include <ringguard/core/crc32.h>
#include <ringguard/core/log.h>
#include <ringguard/core/options.h>
#include <ringguard/core/types.h>
#include <ringguard/observability/observability.h>
#include <ringguard/runtime/communicator.h>
#if RG_CONSUMER_DEVICE
#include <ringguard/runtime/device_factory.h>
#endif

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

int main() {
  const char* check = "123456789";
  const uint32_t crc = ringguard::crc32(check, std::strlen(check));
  std::printf("ringguard consumer: crc32(\"123456789\") = 0x%08X (backend %s)\n", static_cast<unsigned>(crc),
              ringguard::crc32Backend());
  if (crc != 0xCBF43926u) {
    std::fprintf(stderr, "ringguard consumer: expected 0xCBF43926\n");
    return 1;
  }
  if (ringguard::dataTypeSize(ringguard::DataType::kFloat32) != 4) {
    std::fprintf(stderr, "ringguard consumer: dataTypeSize(kFloat32) != 4\n");
    return 1;
  }
  // The settings, logging and observability API links and works without MPI or a communicator.
  ringguard::Options options;
  if (!ringguard::Options::fromEnv(&options).isOk() || !ringguard::setLogSubsystems("ring,guard").isOk()) {
    std::fprintf(stderr, "ringguard consumer: Options::fromEnv or setLogSubsystems failed\n");
    return 1;
  }
  const std::string summary = ringguard::observability::summaryJson();
  if (summary.find("\"communicators\":[]") == std::string::npos) {
    std::fprintf(stderr, "ringguard consumer: unexpected summary %s\n", summary.c_str());
    return 1;
  }
#if RG_CONSUMER_DEVICE
  // The device layer is in every package built with CUDA, whether or not it had MPI.
  if (ringguard::cuda::haveNccl() != bool(RG_CONSUMER_NCCL)) {
    std::fprintf(stderr, "ringguard consumer: cuda::haveNccl() disagrees with RINGGUARD_WITH_NCCL\n");
    return 1;
  }
#endif
  return 0;
}
