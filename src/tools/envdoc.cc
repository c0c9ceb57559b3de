// ringguard_envdoc: prints what is generated from the setting declarations (src/core/settings.cc), so that
// neither the documentation nor the Python fields can drift from the code.
//   ringguard_envdoc [OUTPUT_FILE]            docs/ENV.md
//   ringguard_envdoc --python [OUTPUT_FILE]   python/ringguard/_settings.py
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>

#include "ringguard/core/settings.h"

int main(int argc, char** argv) {
  int first = 1;
  const bool python = argc > 1 && std::strcmp(argv[1], "--python") == 0;
  if (python) ++first;
  if (argc - first > 1 || (argc > first && argv[first][0] == '-')) {
    std::cerr << "usage: " << argv[0] << " [--python] [OUTPUT_FILE]\n";
    return 2;
  }
  const std::string text = python ? ringguard::settingsPython() : ringguard::settingsMarkdown();
  if (argc == first) {
    std::cout << text;
    return std::cout.good() ? 0 : 1;
  }
  std::ofstream file(argv[first], std::ios::binary | std::ios::trunc);
  file << text;
  file.close();
  if (!file) {
    std::cerr << argv[0] << ": cannot write " << argv[first] << "\n";
    return 1;
  }
  return 0;
}
