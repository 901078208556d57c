// src/core/plausible.h: the one range check of numbers from flags, profiles and records.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "src/core/errors.h"
#include "src/core/plausible.h"

namespace sb {
namespace {

TEST(RobustNumbers, NaNAndInfinityAreNeverPlausible) {
    const Plausible positive{0, true, 1e9};
    EXPECT_EQ(implausible(1.0, positive), "");
    EXPECT_EQ(implausible(1e9, positive), "");
    EXPECT_EQ(implausible(std::nan(""), positive), "must be in (0, 1e+09], got nan");
    EXPECT_EQ(implausible(std::numeric_limits<double>::infinity(), positive), "must be in (0, 1e+09], got inf");
    EXPECT_EQ(implausible(0.0, positive), "must be in (0, 1e+09], got 0");
    EXPECT_EQ(implausible(0.0, {0, false, 1}), "");
    EXPECT_EQ(implausible(-0.5, {0, false, 1}), "must be in [0, 1], got -0.5");
}

TEST(RobustNumbers, ARecordFieldIsNamedWithItsFileAndRecord) {
    const nlohmann::json record = {{"time_us", -5.0}, {"name", "x"}};
    auto error = [&](const std::string& key) {
        try {
            plausible_field(record, key, {0, true, 1e12}, "r.jsonl: record 3");
        } catch (const UserError& e) {
            return std::string(e.what());
        }
        return std::string();
    };
    EXPECT_EQ(error("time_us"), "r.jsonl: record 3: key 'time_us': must be in (0, 1e+12], got -5");
    EXPECT_EQ(error("name"), "r.jsonl: record 3: key 'name': not a number");
    EXPECT_EQ(error("gone"), "r.jsonl: record 3: key 'gone': missing");
    EXPECT_EQ(plausible_field({{"time_us", 2.5}}, "time_us", {0, true, 1e12}, "r"), 2.5);
}

}  // namespace
}  // namespace sb
