// ringguard_envdoc: prints the RINGGUARD_* variable reference (docs/ENV.md) from the env registry, so the
// documentation cannot drift from the code. Usage: ringguard_envdoc [OUTPUT_FILE]
#include <fstream>
#include <iostream>
#include <string>

#include "ringguard/core/env.h"

int main(int argc, char** argv) {
  if (argc > 2) {
    std::cerr << "usage: " << argv[0] << " [OUTPUT_FILE]\n";
    return 2;
  }
  const std::string md = ringguard::envMarkdown();
  if (argc == 1) {
    std::cout << md;
    return std::cout.good() ? 0 : 1;
  }
  std::ofstream file(argv[1], std::ios::binary | std::ios::trunc);
  file << md;
  file.close();
  if (!file) {
    std::cerr << argv[0] << ": cannot write " << argv[1] << "\n";
    return 1;
  }
  return 0;
}
