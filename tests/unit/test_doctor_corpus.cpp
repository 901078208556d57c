// The doctor against its snapshot corpus (tests/fixtures/doctor/): every healthy rig of
// corpus/ passes with no warn, fail or unjudged row, and every planted fault of faults.json
// is caught in its check with its verdict, cause and fix, the exit code the docs give and the
// profile the bands come from. One table, one test per case. Every recorded sweep is what the
// stopping rule gives, grown towards the band the doctor computes for its rig.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "src/doctor/checks.h"
#include "src/doctor/snapshot.h"
#include "src/doctor/sources.h"
#include "src/doctor/sweep_sizes.h"

namespace sb::doctor {
namespace {

const std::string kDir = std::string(SCALEBENCH_SOURCE_DIR) + "/tests/fixtures/doctor/";

nlohmann::json read_json(const std::string& path) {
    std::ifstream in(path);
    return nlohmann::json::parse(in);
}

ExpectedBands bands_for(const SystemSnapshot& s) {
    static const std::vector<HardwareProfile> profiles =
        load_profiles(std::string(SCALEBENCH_SOURCE_DIR) + "/configs/hardware");
    static const std::vector<PublishedBusbw> published =
        load_published_busbw(std::string(SCALEBENCH_SOURCE_DIR) + "/results/published/nccl_allreduce.yaml");
    return expected_bands(s, profiles, published);
}

std::string contains_msg(const std::string& field, const std::string& text, const std::string& want) {
    return fmt::format("{} \"{}\" lacks \"{}\"", field, text, want);
}

void expect_case(const nlohmann::json& c) {
    const nlohmann::json patched = read_json(kDir + "corpus/" + c["base"].get<std::string>() + ".json")
                                       .patch(c.value("patch", nlohmann::json::array()));
    if (c.contains("load_error")) {
        try {
            (void)patched.get<SystemSnapshot>();
            ADD_FAILURE() << "the snapshot loaded";
        } catch (const std::exception& e) {
            EXPECT_NE(std::string(e.what()).find(c["load_error"].get<std::string>()), std::string::npos) << e.what();
        }
        return;
    }
    const SystemSnapshot s = patched.get<SystemSnapshot>();
    const ExpectedBands bands = bands_for(s);
    const std::vector<Check> checks = run_checks(s, bands);
    std::string table;
    for (const Check& k : checks)
        table += fmt::format("  {} {}: {} | {}\n", verdict_name(k.verdict), k.name, k.cause, k.fix);
    if (c.contains("profile")) EXPECT_EQ(bands.profile, c["profile"].get<std::string>()) << bands.why_none;
    if (!c["exit"].is_null()) EXPECT_EQ(exit_code(checks), c["exit"].get<int>()) << table;
    if (c.value("healthy", false))
        for (const Check& k : checks)
            EXPECT_TRUE(k.verdict == Verdict::pass || k.verdict == Verdict::skipped)
                << k.name << " is " << verdict_name(k.verdict) << ": " << k.cause;
    for (const Check& k : checks) {  // every warn, fail, skip or unjudged says why; every warn or fail what to do
        if (k.verdict == Verdict::pass) continue;
        EXPECT_FALSE(k.cause.empty()) << k.name;
        if (k.verdict == Verdict::warn || k.verdict == Verdict::fail) EXPECT_FALSE(k.fix.empty()) << k.name;
    }
    for (const nlohmann::json& want : c.value("checks", nlohmann::json::array())) {
        const std::string name = want["check"];
        const auto it = std::find_if(checks.begin(), checks.end(), [&](const Check& k) { return k.name == name; });
        ASSERT_NE(it, checks.end()) << "no check named " << name;
        EXPECT_EQ(verdict_name(it->verdict), want["verdict"].get<std::string>()) << name << "\n" << table;
        for (const char* field : {"cause", "fix", "figures"}) {
            if (!want.contains(field)) continue;
            const std::string& text = field == std::string("cause") ? it->cause
                                      : field == std::string("fix") ? it->fix
                                                                    : it->figures;
            EXPECT_NE(text.find(want[field].get<std::string>()), std::string::npos)
                << name << ": " << contains_msg(field, text, want[field]);
        }
        if (want.contains("not_cause"))
            EXPECT_EQ(it->cause.find(want["not_cause"].get<std::string>()), std::string::npos) << name << ": " << it->cause;
    }
}

class DoctorCorpus : public ::testing::TestWithParam<nlohmann::json> {};

TEST_P(DoctorCorpus, VerdictCauseAndFix) { expect_case(GetParam()); }

std::vector<nlohmann::json> cases() {
    const nlohmann::json table = read_json(kDir + "faults.json");
    return table.at("cases").get<std::vector<nlohmann::json>>();
}

std::string case_name(const ::testing::TestParamInfo<nlohmann::json>& info) {
    std::string n = fmt::format("{:02}_", info.index);
    for (char ch : info.param["name"].get<std::string>()) n += std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
    return n;
}

INSTANTIATE_TEST_SUITE_P(Cases, DoctorCorpus, ::testing::ValuesIn(cases()), case_name);

// Every rig in corpus/ is judged by a case (a rig no case names would test nothing).
TEST(DoctorCorpusTable, EveryRigHasAHealthyCase) {
    std::set<std::string> healthy;
    for (const nlohmann::json& c : cases())
        if (c.value("healthy", false)) healthy.insert(c["base"].get<std::string>());
    for (const auto& e : std::filesystem::directory_iterator(kDir + "corpus"))
        EXPECT_TRUE(healthy.count(e.path().stem().string())) << e.path();
}

// Each rig's collective sweeps replayed through the rule (sweep_sizes.h): the same sizes and the
// same stop, the as-is sweep aimed at the band's low end of the rig's profile, the control at none.
TEST(DoctorCorpusTable, EverySweepIsWhatTheRuleGives) {
    int replayed = 0;
    for (const auto& e : std::filesystem::directory_iterator(kDir + "corpus")) {
        const SystemSnapshot s = load_snapshot(e.path().string());
        for (const CollectiveRun& run : s.collectives) {
            EXPECT_NEAR(run.target_gbps, run.label == "as_is" ? bands_for(s).busbw.lo : 0, 1e-9) << e.path();
            const SweepLimits limits{run.target_gbps, static_cast<size_t>(run.max_bytes),
                                     static_cast<size_t>(run.memory_bytes), 4 * static_cast<size_t>(run.nranks)};
            ASSERT_EQ(run.stops.size(), 3u) << e.path() << " " << run.label;
            for (const SweepStop& stop : run.stops) {
                std::map<size_t, double> recorded;
                std::vector<size_t> sizes;
                for (const AllReduceRow& row : run.rows)
                    if (row.op == stop.op) {
                        recorded[static_cast<size_t>(row.bytes)] = row.busbw_gbps;
                        sizes.push_back(static_cast<size_t>(row.bytes));
                    }
                const SweepResult r = run_sweep([&](size_t bytes) { return recorded.at(bytes); }, limits);
                const std::string where = fmt::format("{} {} {}", e.path().string(), run.label, stop.op);
                EXPECT_EQ(r.sizes, sizes) << where;
                EXPECT_EQ(r.stop, stop.reason) << where;
                EXPECT_EQ(static_cast<double>(r.sizes.back()), stop.bytes) << where;
                ++replayed;
            }
        }
    }
    EXPECT_EQ(replayed, 7 * 2 * 3);  // every rig with collectives: two sweeps of three collectives
}

}  // namespace
}  // namespace sb::doctor
