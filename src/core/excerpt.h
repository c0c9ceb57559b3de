#pragma once
// Values echoed in error messages are user input of any size and any bytes (a 100 KB rules value, a
// setting with a NUL, a file that is not UTF-8): an error quotes them as a short excerpt that is printable
// ASCII, so the message stays readable and converts to a Python str.
#include <cstddef>
#include <string>
#include <string_view>

namespace ringguard {

constexpr size_t kExcerptBytes = 80;

// `text` with every byte outside printable ASCII written as \n, \t, \0 or \xNN; when that would be longer
// than `maxBytes`, its head and tail (about `maxBytes` together) with "...(N bytes)..." between them.
std::string excerpt(std::string_view text, size_t maxBytes = kExcerptBytes);

}  // namespace ringguard
