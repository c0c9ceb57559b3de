#include "core/json_input.h"

#include <set>
#include <vector>

#include "core/excerpt.h"

namespace ringguard {

using nlohmann::json;

namespace {

// The offset of the first byte that does not start or continue a well-formed UTF-8 sequence (RFC 3629: no
// overlong forms, no surrogates, nothing above U+10FFFF), or npos.
size_t firstInvalidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len = 0;
    uint32_t cp = 0, min = 0;
    if ((c & 0xE0) == 0xC0) {
      len = 2, cp = c & 0x1F, min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3, cp = c & 0x0F, min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4, cp = c & 0x07, min = 0x10000;
    } else {
      return i;
    }
    if (i + len > s.size()) return i;
    for (size_t k = 1; k < len; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += len;
  }
  return std::string_view::npos;
}

// Where the parser is: one frame per open object or array.
struct Frame {
  bool array = false;
  size_t index = 0;  // arrays: the element being parsed
  std::string key;   // objects: the member being parsed
  std::set<std::string> keys;
};

std::string pointerOf(const std::vector<Frame>& frames) {
  std::string p;
  for (const Frame& f : frames) {
    if (f.array) {
      p += "/" + std::to_string(f.index);
      continue;
    }
    p += "/";
    for (const char c : f.key) p += c == '~' ? "~0" : c == '/' ? "~1" : std::string(1, c);
  }
  return p;
}

// Thrown out of the parser's callback to stop it where it is.
struct Stop {
  std::string problem;
};

}  // namespace

Status parseJsonInput(std::string_view text, const std::string& origin, const JsonLimits& limits, json* out) {
  auto refuse = [&](const std::string& problem) {
    return Status(StatusCode::kInvalidArgument, origin + ": " + problem);
  };
  if (text.size() > limits.maxBytes) {
    return refuse(std::to_string(text.size()) + " bytes, above the limit of " +
                  std::to_string(limits.maxBytes));
  }
  if (const size_t nul = text.find('\0'); nul != std::string_view::npos) {
    return refuse("byte " + std::to_string(nul) +
                  " is a NUL, which JSON text never holds (inside a string write \\u0000)");
  }
  if (const size_t bad = firstInvalidUtf8(text); bad != std::string_view::npos) {
    return refuse("byte " + std::to_string(bad) + " is not UTF-8 (near '" +
                  excerpt(text.substr(bad >= 16 ? bad - 16 : 0, 32)) + "')");
  }
  std::vector<Frame> frames;
  auto pointer = [&] { return "'" + excerpt(pointerOf(frames), 120) + "'"; };
  auto completed = [&] {
    if (!frames.empty() && frames.back().array) ++frames.back().index;
  };
  const json::parser_callback_t callback = [&](int depth, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        if (depth >= limits.maxDepth) {
          throw Stop{"at " + pointer() + ": nested deeper than the limit of " +
                     std::to_string(limits.maxDepth) + " levels"};
        }
        frames.push_back(Frame{event == json::parse_event_t::array_start, 0, {}, {}});
        break;
      case json::parse_event_t::key: {
        Frame& f = frames.back();
        f.key = parsed.get<std::string>();
        if (!f.keys.insert(f.key).second) throw Stop{"key " + pointer() + " appears twice in its object"};
        break;
      }
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        frames.pop_back();
        completed();
        break;
      case json::parse_event_t::value:
        completed();
        break;
    }
    return true;
  };
  try {
    *out = json::parse(text.begin(), text.end(), callback);
  } catch (const Stop& s) {
    return refuse(s.problem);
  } catch (const json::parse_error& e) {
    // e.byte counts the bytes read, the offending one included: its offset is one less.
    return refuse("not valid JSON at byte " + std::to_string(e.byte > 0 ? e.byte - 1 : 0) + ": " +
                  excerpt(e.what(), 200));
  } catch (const json::out_of_range& e) {
    // 406: a number literal outside a double's range ("1e400"); the message quotes the literal.
    const std::string what = e.what();
    const size_t q = what.find('\'');
    const std::string literal = q == std::string::npos ? "" : what.substr(q + 1, what.rfind('\'') - q - 1);
    return refuse("key " + pointer() + ": the number " + excerpt(literal) +
                  " is outside the range of a double");
  } catch (const json::exception& e) {
    return refuse("at " + pointer() + ": " + excerpt(e.what(), 200));
  }
  return Status::ok();
}

}  // namespace ringguard
