#pragma once
// What the fuzz targets share: a property check that aborts (libFuzzer and the replay driver both report an
// abort as a crash, with the input that caused it), and a reader that takes fixed-size values from the front
// of the input and leaves the rest as bytes or text.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#define RINGGUARD_FUZZ_CHECK(cond)                                                          \
  do {                                                                                      \
    if (!(cond)) {                                                                          \
      std::fprintf(stderr, "%s:%d: fuzz property failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                         \
    }                                                                                       \
  } while (0)

namespace ringguard::fuzz {

class FuzzInput {
 public:
  FuzzInput(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  // The next sizeof(T) bytes as a T; bytes past the end of the input read as 0, so every input is usable.
  template <typename T>
  T take() {
    static_assert(std::is_trivially_copyable_v<T>, "take() copies bytes");
    unsigned char raw[sizeof(T)] = {};
    const size_t n = sizeof(T) < size_ ? sizeof(T) : size_;
    if (n != 0) std::memcpy(raw, data_, n);
    data_ += n;
    size_ -= n;
    T value;
    std::memcpy(&value, raw, sizeof(T));
    return value;
  }
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  std::string rest() const { return std::string(reinterpret_cast<const char*>(data_), size_); }

 private:
  const uint8_t* data_;
  size_t size_;
};

// `text` cut at every '\n' (n separators give n + 1 lines; the empty text one empty line).
inline std::vector<std::string> splitLines(const std::string& text) {
  std::vector<std::string> out;
  size_t begin = 0;
  while (begin <= text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    out.push_back(text.substr(begin, end - begin));
    begin = end + 1;
  }
  return out;
}

}  // namespace ringguard::fuzz
