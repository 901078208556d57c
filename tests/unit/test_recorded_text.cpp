// The one sanitizer of recorded strings (src/core/results.h: json_text): a record holding a
// byte that is not UTF-8 (an environment variable NCCL_X=$'\xff' the record captures, a host
// name, a key) is written, with the byte as \xNN, and read back; nothing is thrown away.
#include <filesystem>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "src/core/files.h"
#include "src/core/results.h"

namespace sb {
namespace {

TEST(RecordedText, EveryStringOfARecordIsMadeUtf8WithItsBadBytesNamed) {
    EXPECT_EQ(recordable_text("plain \xc3\xa9"), "plain \xc3\xa9");
    EXPECT_EQ(recordable_text("a\xff" "b\xc3"), "a\\xffb\\xc3");
    nlohmann::json record = {{"environment", {{"tuning_variables", {{"NCCL_X", "\xff"}, {"K\xfe", "v"}}}}},
                             {"hosts", {"node\x80" "1"}}};
    const std::string text = json_text(record);
    const nlohmann::json back = nlohmann::json::parse(text);
    EXPECT_EQ(back["environment"]["tuning_variables"]["NCCL_X"], "\\xff");
    EXPECT_EQ(back["environment"]["tuning_variables"]["K\\xfe"], "v");
    EXPECT_EQ(back["hosts"][0], "node\\x801");
    // Valid records are written exactly as dump() writes them.
    const nlohmann::json fine = {{"a", 1}, {"b", "\xc3\xa9"}};
    EXPECT_EQ(json_text(fine), fine.dump());
    EXPECT_EQ(json_text(fine, 2), fine.dump(2));
}

TEST(RecordedText, ARecordWithANonUtf8StringIsAppendedAndReadBack) {
    const auto path = std::filesystem::temp_directory_path() / ("sb-recorded-text-" + std::to_string(::getpid()) + ".jsonl");
    std::filesystem::remove(path);
    append_record(path.string(), {{"kind", "train"}, {"environment", {{"NCCL_X", "\xff"}}}});
    const ReadResult read = read_records(path.string());
    ASSERT_EQ(read.records.size(), 1u);
    EXPECT_EQ(read.records[0]["environment"]["NCCL_X"], "\\xff");
    std::filesystem::remove(path);
}

}  // namespace
}  // namespace sb
