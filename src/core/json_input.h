#pragma once
// JSON that comes from users (rules files, rules text, RINGGUARD_POLICY_SET values, telemetry traces),
// parsed within limits: the parser is iterative, but a document nested 100000 deep crashes whatever walks
// it recursively afterwards (dump, comparison, copy), and one of 100 MB is no rules file. Every refusal names
// the input (`origin`), the place (a byte offset or a JSON pointer) and, for a limit, the limit.
#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "ringguard/core/status.h"

namespace ringguard {

struct JsonLimits {
  size_t maxBytes = size_t{1} << 20;
  int maxDepth = 32;  // objects and arrays inside each other; the top-level value is depth 1
};

// One JSON value from `text`, refused (kInvalidArgument, the message starting with `origin`) when:
// larger than maxBytes; a NUL byte anywhere (nlohmann's lexer takes a NUL for the end of the input, so
// "{}\0garbage" would parse as {}; inside a string it is written \u0000); a byte that is not UTF-8 (named
// by its offset); nested deeper than maxDepth; a key twice in one object (JSON leaves that to the reader:
// nlohmann keeps the last, which would hide a misedit); a number outside a double's range (named by its
// key); anything else that is not JSON (named by its byte offset).
Status parseJsonInput(std::string_view text, const std::string& origin, const JsonLimits& limits,
                      nlohmann::json* out);

}  // namespace ringguard
