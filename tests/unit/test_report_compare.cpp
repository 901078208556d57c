// `scalebench report --compare` (src/commands/report.cpp): systems side by side, one row per world
// size, throughput / efficiency / busbw per system; names from the environment record.
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>

#include <unistd.h>

#include "src/commands/report.h"
#include "src/core/results.h"

namespace sb {
namespace {

std::string fresh_path(const std::string& name) {
    auto dir = std::filesystem::temp_directory_path() / ("scalebench-compare-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    const auto path = dir / name;
    std::filesystem::remove(path);
    return path.string();
}

nlohmann::json train_record(const nlohmann::json& environment, int n, double samples_per_s, nlohmann::json efficiency,
                            double busbw) {
    return {{"subcommand", "train"}, {"backend", "cpu"}, {"model", "mlp"}, {"precision", "fp32"},
            {"scaling_mode", "weak"}, {"local_batch", 32}, {"global_batch", 32 * n},
            {"config", {{"source", "configs/ci-small.yaml"}}}, {"environment", environment}, {"world_size", n},
            {"samples_per_s", samples_per_s}, {"scaling_efficiency", efficiency}, {"allreduce_busbw_gbps", busbw}};
}

TEST(ReportCompare, SystemsSideBySideOneRowPerWorldSize) {
    const std::string a = fresh_path("a.jsonl"), b = fresh_path("b.jsonl");
    const nlohmann::json gpu_box = {{"hostnames", {"box"}}, {"gpu", {{"name", "NVIDIA H200"}}}};
    const nlohmann::json cluster = {{"hostnames", {"node7"}}, {"slurm", {{"SLURM_JOB_PARTITION", "gpu"}}}};
    append_record(a, train_record(gpu_box, 1, 1000.0, 1.0, 0.0));
    append_record(a, train_record(gpu_box, 2, 1900.0, 0.95, 150.0));
    append_record(a, train_record(gpu_box, 4, 3600.0, 0.9, 180.0));
    // One launch per world size: no efficiency in the n = 2 record, taken against this system's n = 1.
    append_record(b, train_record(cluster, 1, 500.0, 1.0, 0.0));
    append_record(b, train_record(cluster, 2, 800.0, nullptr, 20.5));
    append_record(b, {{"subcommand", "gemm"}});

    std::ostringstream md, err;
    EXPECT_EQ(write_report({{a, b}, false, true}, md, err), 5);
    const std::string text = md.str();
    EXPECT_NE(text.find("| ranks | NVIDIA H200 (box) samples/s | NVIDIA H200 (box) efficiency | NVIDIA H200 (box) "
                        "busbw GB/s | cpu (Slurm partition gpu) samples/s |"),
              std::string::npos)
        << text;
    EXPECT_NE(text.find("| 2 | 1900.0 | 95.0% | 150.00 | 800.0 | 80.0% | 20.50 |"), std::string::npos) << text;
    EXPECT_NE(text.find("| 4 | 3600.0 | 90.0% | 180.00 | - | - | - |"), std::string::npos) << text;

    std::ostringstream csv;
    write_report({{a, b}, true, true}, csv, err);
    EXPECT_NE(csv.str().find("1,1000.0,100.0%,0.00,500.0,100.0%,0.00\n"), std::string::npos) << csv.str();
}

TEST(ReportCompare, SameSystemTwiceIsToldApartByWorkloadOrFile) {
    const std::string a = fresh_path("ring.jsonl"), b = fresh_path("tree.jsonl");
    const nlohmann::json box = {{"hostnames", {"box"}}};
    // The same system and workload in two files (e.g. NCCL_ALGO=Ring against Tree): the file names it.
    append_record(a, train_record(box, 1, 100.0, 1.0, 0.0));
    append_record(b, train_record(box, 1, 110.0, 1.0, 0.0));
    std::ostringstream md, err;
    write_report({{a, b}, false, true}, md, err);
    EXPECT_NE(md.str().find("| ranks | cpu (box) [ring.jsonl] samples/s |"), std::string::npos) << md.str();
    EXPECT_NE(md.str().find("[tree.jsonl] samples/s"), std::string::npos) << md.str();

    // Two workloads on one system: the workload names them.
    const std::string c = fresh_path("two-workloads.jsonl");
    nlohmann::json bf16 = train_record(box, 1, 300.0, 1.0, 0.0);
    bf16["precision"] = "bf16";
    append_record(c, train_record(box, 1, 100.0, 1.0, 0.0));
    append_record(c, bf16);
    std::ostringstream two;
    write_report({{c}, false, true}, two, err);
    EXPECT_NE(two.str().find("| ranks | cpu (box), ci-small, fp32, weak, batch 32/rank samples/s |"), std::string::npos)
        << two.str();
    EXPECT_NE(two.str().find("cpu (box), ci-small, bf16, weak, batch 32/rank samples/s"), std::string::npos)
        << two.str();
    EXPECT_NE(two.str().find("| 1 | 100.0 | 100.0% | 0.00 | 300.0 | 100.0% | 0.00 |"), std::string::npos)
        << two.str();
}

TEST(ReportCompare, RepeatedMeasurementsOfOneSizeShowTheirMedian) {
    const std::string a = fresh_path("repeat.jsonl");
    const nlohmann::json box = {{"hostnames", {"box"}}};
    for (double t : {90.0, 100.0, 130.0}) append_record(a, train_record(box, 1, t, 1.0, 0.0));
    std::ostringstream md, err;
    write_report({{a}, false, true}, md, err);
    EXPECT_NE(md.str().find("| 1 | 100.0 | 100.0% | 0.00 |"), std::string::npos) << md.str();
}

TEST(ReportCompare, NoTrainRecordsComparesNothing) {
    const std::string a = fresh_path("none.jsonl");
    append_record(a, {{"subcommand", "gemm"}});
    std::ostringstream md, err;
    EXPECT_EQ(write_report({{a}, false, true}, md, err), 0);
    EXPECT_TRUE(md.str().empty());
}

}  // namespace
}  // namespace sb

namespace sb {
namespace {

TEST(ReportCompare, ProjectedRecordsStandBesideMeasuredOnes) {
    const std::string a = fresh_path("measured-and-projected.jsonl");
    const nlohmann::json box = {{"hostnames", {"vm"}}, {"gpu", {{"name", "NVIDIA H200"}}}};
    const nlohmann::json profile = {{"hostnames", {"h200-sxm"}}, {"gpu", {{"name", "NVIDIA H200"}}}};
    append_record(a, train_record(box, 1, 1000.0, 1.0, 0.0));
    nlohmann::json projected = train_record(profile, 1, 1100.0, 1.0, 0.0);
    projected["subcommand"] = "project";
    projected["projected"] = true;
    append_record(a, projected);
    std::ostringstream md, err;
    EXPECT_EQ(write_report({{a}, false, true}, md, err), 2);
    EXPECT_NE(md.str().find("NVIDIA H200 (h200-sxm) projected samples/s"), std::string::npos) << md.str();
    EXPECT_NE(md.str().find("NVIDIA H200 (vm) samples/s"), std::string::npos) << md.str();
}

}  // namespace
}  // namespace sb
