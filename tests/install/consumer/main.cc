// Consumer of the installed ringguard package (ctest: install_consumer). MPI-free on purpose: it only
// needs the headers and ringguard::ringguard to resolve, link and run.
#include <ringguard/core/crc32.h>
#include <ringguard/core/types.h>

#include <cstdint>
#include <cstdio>
#include <cstring>

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
  return 0;
}
