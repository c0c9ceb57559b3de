#include "core/excerpt.h"

#include <cstdio>

namespace ringguard {

namespace {

std::string escaped(unsigned char c) {
  if (c == '\\') return "\\\\";
  if (c >= 0x20 && c < 0x7f) return std::string(1, static_cast<char>(c));
  if (c == '\n') return "\\n";
  if (c == '\t') return "\\t";
  if (c == 0) return "\\0";
  char buf[5];
  std::snprintf(buf, sizeof(buf), "\\x%02x", c);
  return buf;
}

}  // namespace

std::string excerpt(std::string_view text, size_t maxBytes) {
  std::string whole;
  size_t i = 0;
  for (; i < text.size() && whole.size() <= maxBytes; ++i)
    whole += escaped(static_cast<unsigned char>(text[i]));
  if (i == text.size() && whole.size() <= maxBytes) return whole;
  // Head and tail, each about half the budget once escaped.
  const size_t half = maxBytes / 2;
  std::string head, tail;
  size_t front = 0, back = text.size();
  while (front < back) {
    const std::string e = escaped(static_cast<unsigned char>(text[front]));
    if (head.size() + e.size() > half) break;
    head += e;
    ++front;
  }
  while (back > front) {
    const std::string e = escaped(static_cast<unsigned char>(text[back - 1]));
    if (tail.size() + e.size() > half) break;
    tail.insert(0, e);
    --back;
  }
  return head + "...(" + std::to_string(text.size()) + " bytes)..." + tail;
}

}  // namespace ringguard
