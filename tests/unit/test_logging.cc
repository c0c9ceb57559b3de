// The logging facade (issue 18): every line names its subsystem; RINGGUARD_LOG_SUBSYS's selection drops
// messages below warn level of the other subsystems, never warnings and errors; a bad selection is an error
// naming the subsystem; the first communicator's rank prefixes every line.
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>

#include <cstdlib>
#include <sstream>
#include <string>

#include "core/logging.h"
#include "loopback_util.h"

namespace ringguard {
namespace {

// Captures what the library logger prints while alive (at debug level), then restores it.
class Capture {
 public:
  Capture() : sink_(std::make_shared<spdlog::sinks::ostream_sink_mt>(os_)), level_(logger()->level()) {
    logger()->sinks().push_back(sink_);
    logger()->set_level(spdlog::level::debug);
  }
  ~Capture() {
    auto& sinks = logger()->sinks();
    sinks.erase(std::find(sinks.begin(), sinks.end(), sink_));
    logger()->set_level(level_);
    EXPECT_TRUE(setLogSubsystems("all").isOk());
  }
  std::string text() const { return os_.str(); }

 private:
  std::ostringstream os_;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> sink_;
  spdlog::level::level_enum level_;
};

TEST(Logging, SubsystemSelectionKeepsWarningsAndErrors) {
  Capture c;
  ASSERT_TRUE(setLogSubsystems("ring,guard").isOk());
  logDebug(Subsys::kRing, "ring debug {}", 1);
  logInfo(Subsys::kGuard, "guard info {}", 2);
  logDebug(Subsys::kTransport, "transport debug {}", 3);
  logInfo(Subsys::kPolicy, "policy info {}", 4);
  logWarn(Subsys::kTransport, "transport warning {}", 5);
  logError(Subsys::kPolicy, "policy error {}", 6);
  const std::string t = c.text();
  EXPECT_NE(t.find("[ring] ring debug 1"), std::string::npos) << t;
  EXPECT_NE(t.find("[guard] guard info 2"), std::string::npos) << t;
  EXPECT_EQ(t.find("transport debug 3"), std::string::npos) << t;
  EXPECT_EQ(t.find("policy info 4"), std::string::npos) << t;
  EXPECT_NE(t.find("[transport] transport warning 5"), std::string::npos) << t;
  EXPECT_NE(t.find("[policy] policy error 6"), std::string::npos) << t;
}

TEST(Logging, ExclusionAndAll) {
  Capture c;
  ASSERT_TRUE(setLogSubsystems("^guard,policy").isOk());
  logDebug(Subsys::kGuard, "excluded guard");
  logDebug(Subsys::kPolicy, "excluded policy");
  logDebug(Subsys::kCore, "kept core");
  ASSERT_TRUE(setLogSubsystems("all").isOk());
  logDebug(Subsys::kGuard, "all guard");
  const std::string t = c.text();
  EXPECT_EQ(t.find("excluded"), std::string::npos) << t;
  EXPECT_NE(t.find("[core] kept core"), std::string::npos) << t;
  EXPECT_NE(t.find("[guard] all guard"), std::string::npos) << t;
}

TEST(Logging, UnknownSubsystemIsAnErrorNamingIt) {
  ASSERT_TRUE(setLogSubsystems("ring").isOk());
  const Status st = setLogSubsystems("ring,rng");
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("unknown subsystem 'rng'"), std::string::npos) << st.message();
  Capture c;  // the selection is unchanged: ring only
  ASSERT_TRUE(setLogSubsystems("ring").isOk());
  logDebug(Subsys::kRing, "still ring");
  EXPECT_NE(c.text().find("still ring"), std::string::npos);
  // The environment's spelling goes through the same check when a communicator is made.
  Options o;
  EXPECT_EQ(Options::fromLookup(
                [](const char* n) -> const char* {
                  return std::string(n) == "RINGGUARD_LOG_SUBSYS" ? "ring,rng" : nullptr;
                },
                &o)
                .code(),
            StatusCode::kInvalidArgument);
}

// The rank is set once per process by its first communicator: every later line carries it.
TEST(Logging, LinesCarryTheRankOfTheFirstCommunicator) {
  { testing::LoopbackGroup g(1, Options{}); }  // a process's first communicator sets it (maybe earlier)
  Capture c;
  logWarn(Subsys::kCore, "with a rank");
  EXPECT_NE(c.text().find("[rank "), std::string::npos) << c.text();
}

}  // namespace
}  // namespace ringguard
