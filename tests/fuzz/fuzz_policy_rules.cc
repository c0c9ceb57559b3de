// The downgrade rules parser (ringguard/policy/rules.h): parseRules over any text, with RINGGUARD_POLICY_SET
// edits. Input: the rules text, then optionally a 0x01 byte and the edits. Whatever the input (nested 100000
// deep, numbers past a double, NULs, bytes that are not UTF-8, duplicate keys), the parser returns: rules
// that load again to the same digest, or kInvalidArgument with a short printable message naming the origin.
#include <cstdint>
#include <string>

#include "fuzz_util.h"
#include "ringguard/policy/rules.h"

using namespace ringguard;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t cut = input.find('\x01');
  const std::string text = input.substr(0, cut);
  const std::string edits = cut == std::string::npos ? "" : input.substr(cut + 1);
  PolicyRules r;
  const Status st = parseRules(text, "fuzz", edits, &r);
  if (st.isOk()) {
    PolicyRules again;
    RINGGUARD_FUZZ_CHECK(parseRules(text, "fuzz", edits, &again).isOk());
    RINGGUARD_FUZZ_CHECK(again.digest == r.digest);
    for (size_t i = 1; i < r.families.size(); ++i)
      RINGGUARD_FUZZ_CHECK(r.families[i - 1].name < r.families[i].name);
    for (const PolicyFamily& f : r.families) RINGGUARD_FUZZ_CHECK(!f.variants.empty());
    return 0;
  }
  RINGGUARD_FUZZ_CHECK(st.code() == StatusCode::kInvalidArgument);
  const std::string& m = st.message();
  RINGGUARD_FUZZ_CHECK(m.rfind("rules fuzz", 0) == 0 || m.rfind("RINGGUARD_POLICY_SET entry '", 0) == 0);
  // Echoed values are excerpts: the message stays short and printable (it becomes a Python str).
  RINGGUARD_FUZZ_CHECK(m.size() < 1024);
  for (const char c : m) RINGGUARD_FUZZ_CHECK(c >= 0x20 && c < 0x7f);
  return 0;
}
