// The projection checked against what was measured and what was published:
// (1) every measured one-GPU `train` record under results/ (the H200 and H100 runs),
//     predicted from the same folder's gemm and comm records and other models' train and
//     op_profile records (nothing of the predicted model's records goes in);
// (2) the nccl-tests bus bandwidths of results/published/nccl_allreduce.yaml, predicted from
//     the hardware profiles; the median error of the entries marked `validation`.
// (3) the BERT and ResNet-50 training throughputs of results/published/bert_throughput.yaml
//     and resnet50_throughput.yaml on 1-8 GPUs, projected from the profiles for the preset with
//     the published batch, sequence length and precision; the median error, the "done when".
//     Two measures: the throughput itself, and the speed-up T(N) / T(1) against the same
//     source's 1-GPU row (the scaling, with each implementation's single-GPU efficiency
//     divided out).
// Each prints its table (the README's validation section quotes them).
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <set>

#include <fmt/format.h>

#include "src/core/config.h"
#include "src/projection/hardware.h"
#include "src/commands/project_command.h"
#include "src/projection/projection.h"
#include "src/core/results.h"

namespace sb {
namespace {

const std::string kSource = SCALEBENCH_SOURCE_DIR;

// The targets: measured step time within 10%, published figures within 15% (median).
// The measured bound is not the target: over the nine one-GPU H200 runs (results/h200-20261202
// and the lead's h200-20261202b) the median error is 35%, the transformer's kernels being
// slower than the roofline (README, Projection); it guards against the model getting worse.
constexpr double kMeasuredStepBound = 0.40;
constexpr double kPublishedMedianBound = 0.15;
// Absolute throughput misses that target (docs/projection.md); this bound only guards against
// the model getting worse. The published figures are PyTorch's steps (data loader in the timed
// loop for some); the projection is of scalebench's, whose ResNet fuses BatchNorm with its ReLU
// and residual add and whose transformers fuse attention and the residual LayerNorm: the faster
// scalebench's own step, the further above those rows it projects (median 57%).
constexpr double kThroughputGuard = 0.60;
// The step's footprint against NVML's peak memory in use: the target is 10% (issue 17); runs of the
// current step land within -15..+12%, older folders ran other code (docs/projection.md). This bound
// guards against regressions.
constexpr double kFootprintBound = 0.16;
// The A100/4090 ratio's median target is 10% (issue 17); BERT's 8 pairs meet it, ResNet-50's
// AMP pairs miss it by 30-50% and hold the median of all 18 above it (docs/projection.md says
// why). This bound guards against the model getting worse.
constexpr double kRatioMedianGuard = 0.16;
// The 4090's 2-GPU speed-ups: the target is 10% each at the central values; BERT-large lands
// just above it (docs/projection.md). Guarded here; every published one must lie inside its band.
constexpr double kStagedSpeedupGuard = 0.12;

double median_of(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t h = v.size() / 2;
    return v.size() % 2 ? v[h] : 0.5 * (v[h - 1] + v[h]);
}

// Every one-GPU `train` record under results/<folder>/ (any depth) made on a GPU a profile describes,
// predicted with --calibrate from the same folder's other measurements only: its gemm and
// comm records, and train and op_profile records of *other* models (they set the optimizer's
// bandwidth fraction and the per-op efficiencies); never a record of the model being
// predicted. Where the folder has an op profile of the predicted model at its batch, the
// projection from it is printed too, as a check of the schedule (the sum of its own measured
// ops: not a prediction, not in the median).
TEST(ProjectionValidation, PredictsEveryMeasuredTrainRun) {
    std::vector<HardwareProfile> profiles;
    for (const auto& e : std::filesystem::directory_iterator(kSource + "/configs/hardware"))
        profiles.push_back(load_hardware_profile(e.path().string()));
    std::sort(profiles.begin(), profiles.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
    auto profile_of = [&](const std::string& gpu) -> const HardwareProfile* {
        for (const auto& p : profiles)
            if (p.device_name == gpu) return &p;
        return nullptr;
    };
    auto gpu_of = [](const nlohmann::json& r) {
        const auto& env = r.value("environment", nlohmann::json::object());
        return env.contains("gpu") && env["gpu"].is_object() ? env["gpu"].value("name", std::string()) : std::string();
    };
    auto per_model = [](const nlohmann::json& r) {
        const std::string sub = r.value("subcommand", "");
        return sub == "train" || sub == "op_profile";
    };

    std::vector<std::filesystem::path> folders;
    for (const auto& e : std::filesystem::directory_iterator(kSource + "/results"))
        if (e.is_directory()) folders.push_back(e.path());
    std::sort(folders.begin(), folders.end());
    const std::filesystem::path scratch = std::filesystem::temp_directory_path() / "scalebench_validation";
    std::filesystem::create_directories(scratch);

    std::vector<double> step_errors;
    std::printf("| run | model, batch, precision, CUDA graphs | step ms measured | projected | error | compute | "
                "exposed comm | optimizer | optimizer bandwidth from other models | op profiles of | from its own op "
                "profile (check) |\n"
                "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
    for (const auto& folder : folders) {
        std::vector<std::string> measurement_files;                      // gemm, comm
        std::vector<std::pair<std::string, nlohmann::json>> model_records;  // (file, train or op_profile record)
        std::vector<std::filesystem::path> files;
        for (const auto& e : std::filesystem::recursive_directory_iterator(folder))
            if (e.path().extension() == ".jsonl") files.push_back(e.path());
        std::sort(files.begin(), files.end());
        for (const auto& f : files) {
            const ReadResult read = read_records(f.string());
            bool has_model_records = false;
            for (const auto& r : read.records)
                if (per_model(r)) {
                    has_model_records = true;
                    model_records.emplace_back(std::filesystem::relative(f, folder).string(), r);
                }
            if (!has_model_records && !read.records.empty()) measurement_files.push_back(f.string());
        }
        for (const auto& [file, r] : model_records) {
            if (r.value("subcommand", "") != "train") continue;
            const HardwareProfile* hw = profile_of(gpu_of(r));
            if (!hw || r.value("world_size", 0) != 1) continue;  // CPU runs; multi-GPU runs are not here yet
            const TrainConfig cfg = config_of_record(r, file);
            // Calibration: the folder's measurements and the records of other models.
            std::vector<std::string> cal_files = measurement_files;
            const std::string others = (scratch / (folder.filename().string() + "-others.jsonl")).string();
            const std::string own = (scratch / (folder.filename().string() + "-own-profile.jsonl")).string();
            std::filesystem::remove(others);
            std::filesystem::remove(own);
            std::set<std::string> profiled_models;
            for (const auto& [other_file, o] : model_records) {
                const bool one_gpu = o.value("subcommand", "") == "op_profile" || o.value("world_size", 0) == 1;
                if (gpu_of(o) != hw->device_name || !one_gpu) continue;
                if (o["num_params"] != r["num_params"]) {
                    append_record(others, o);
                    if (o["subcommand"] == "op_profile") profiled_models.insert(o["model"].get<std::string>());
                } else if (o["subcommand"] == "op_profile" && o["local_batch"] == r["local_batch"] &&
                           o["precision"] == r["precision"]) {
                    append_record(own, o);
                }
            }
            if (std::filesystem::exists(others)) cal_files.push_back(others);
            const CostModel model(*hw, calibrate(*hw, cal_files));
            TrainConfig at_batch = cfg;
            at_batch.batch_size = r["local_batch"].get<int>();
            const Projection p = project_workload(at_batch, model, {1}, {1}).at(0);
            // The trace is the code that ran: same parameters, same FLOPs.
            EXPECT_EQ(p.record["num_params"], r["num_params"]) << file;
            EXPECT_DOUBLE_EQ(p.record["model_flops_per_step"].get<double>(), r["model_flops_per_step"].get<double>())
                << file;
            auto cell = [&](const char* key, double predicted) {
                const double m = r[key]["median"].get<double>();
                return fmt::format("{:.3f} / {:.3f} ({:+.1f}%)", m, predicted, 100.0 * (predicted - m) / m);
            };
            const double step = r["step_ms"]["median"].get<double>();
            const double error = (p.step.step_ms - step) / step;
            step_errors.push_back(std::abs(error));
            std::string own_check = "-";
            if (std::filesystem::exists(own)) {
                std::vector<std::string> with_own = cal_files;
                with_own.push_back(own);
                const double own_ms =
                    project_workload(at_batch, CostModel(*hw, calibrate(*hw, with_own)), {1}, {1}).at(0).step.step_ms;
                own_check = fmt::format("{:.3f} ({:+.1f}%)", own_ms, 100.0 * (own_ms - step) / step);
            }
            std::string profiled = profiled_models.empty() ? "none" : "";
            for (const auto& m : profiled_models) profiled += (profiled.empty() ? "" : ", ") + m;
            const double fraction = model.calibration.optimizer_memory_efficiency;
            std::printf("| %s/%s | %s, %d, %s, %s | %.3f | %.3f | %+.1f%% | %s | %s | %s | %s | %s | %s |\n",
                        folder.filename().string().c_str(), file.c_str(), r["model"].get<std::string>().c_str(),
                        r["local_batch"].get<int>(), r["precision"].get<std::string>().c_str(),
                        r["config"].value("cuda_graphs", true) ? "on" : "off", step, p.step.step_ms, 100.0 * error,
                        cell("compute_ms", p.step.compute_ms).c_str(), cell("exposed_comm_ms", p.step.exposed_comm_ms).c_str(),
                        cell("optimizer_ms", p.step.optimizer_ms).c_str(),
                        fraction > 0 ? fmt::format("{:.3f}", fraction).c_str() : "none", profiled.c_str(),
                        own_check.c_str());
        }
    }
    ASSERT_GE(step_errors.size(), 1u) << "no measured one-GPU train record of a profiled GPU under results/";
    const double median = median_of(step_errors);
    std::printf("median |step error| of %zu measured runs: %.1f%% (the issue's target: 10%%)\n", step_errors.size(),
                100.0 * median);
    EXPECT_LT(median, kMeasuredStepBound);
}

// The footprint of the step against the device memory NVML saw in use during every one-GPU
// `train` run under results/ that recorded it (telemetry_by_rank[0].memory_used_mib.max: the whole
// process, CUDA context included). Records of the same run configuration are counted once.
TEST(ProjectionValidation, FootprintAgainstMeasuredMemory) {
    std::vector<std::filesystem::path> files;
    for (const auto& e : std::filesystem::recursive_directory_iterator(kSource + "/results"))
        if (e.path().extension() == ".jsonl") files.push_back(e.path());
    std::sort(files.begin(), files.end());
    std::set<std::string> seen;
    std::vector<double> errors;
    std::printf("| run | model, batch, precision | measured GiB (NVML, peak) | footprint GiB | error |\n| --- | --- | --- | --- | --- |\n");
    for (const auto& f : files) {
        for (const auto& r : read_records(f.string()).records) {
            if (r.value("subcommand", "") != "train" || r.value("world_size", 0) != 1 || r.value("backend", "") != "cuda")
                continue;
            if (!r.contains("telemetry_by_rank") || !r["telemetry_by_rank"].is_array() || r["telemetry_by_rank"].empty() ||
                !r["telemetry_by_rank"][0].contains("memory_used_mib"))
                continue;
            const nlohmann::json& used = r["telemetry_by_rank"][0]["memory_used_mib"];
            if (!used.is_object() || !used.contains("max") || !used["max"].is_number()) continue;
            const std::string key = fmt::format("{} {} {} {}", r["num_params"].get<size_t>(), r["local_batch"].get<int>(),
                                                r["precision"].get<std::string>(), used["max"].get<double>());
            if (!seen.insert(key).second) continue;  // the same run's record in another file
            const TrainConfig cfg = config_of_record(r, f.string());
            const double measured = used["max"].get<double>() * 1024.0 * 1024.0;
            const double footprint = footprint_bytes(trace_step(cfg, r["local_batch"].get<int>()));
            const double error = (footprint - measured) / measured;
            errors.push_back(std::abs(error));
            std::printf("| %s | %s, %d, %s | %.2f | %.2f | %+.1f%% |\n",
                        std::filesystem::relative(f, kSource + "/results").string().c_str(),
                        r["model"].get<std::string>().c_str(), r["local_batch"].get<int>(),
                        r["precision"].get<std::string>().c_str(), measured / 1073741824.0, footprint / 1073741824.0,
                        100.0 * error);
        }
    }
    ASSERT_GE(errors.size(), 3u) << "no one-GPU train record with NVML memory telemetry under results/";
    std::printf("median |error| of %zu footprints: %.1f%% (the issue's target: 10%%)\n\n", errors.size(),
                100.0 * median_of(errors));
    EXPECT_LT(median_of(errors), kFootprintBound);
}

TEST(ProjectionValidation, PublishedAllReduceBusBandwidths) {
    const std::string file = kSource + "/results/published/nccl_allreduce.yaml";
    const YAML::Node root = YAML::LoadFile(file);
    ASSERT_TRUE(root["entries"].IsSequence());
    std::vector<double> errors;
    std::printf("| entry | use | profile | GPUs | message | published busbw GB/s | projected | error | source |\n"
                "| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
    for (const auto& e : root["entries"]) {
        const std::string id = e["id"].as<std::string>();
        const std::string use = e["use"].as<std::string>();
        ASSERT_TRUE(use == "validation" || use == "calibration") << id;
        ASSERT_FALSE(e["source"].as<std::string>().empty()) << id;
        ASSERT_FALSE(e["configuration"].as<std::string>().empty()) << id;
        HardwareProfile hw =
            load_hardware_profile(kSource + "/configs/hardware/" + e["profile"].as<std::string>() + ".yaml");
        if (e["nics_per_node"]) hw.nics_per_node.value = e["nics_per_node"].as<double>();
        const int g = e["gpus_per_node"].as<int>(), nodes = e["nodes"].as<int>();
        const double bytes = e["bytes"].as<double>();
        const double published = e["busbw_gbps"].as<double>();
        const double projected = CostModel(hw).all_reduce_busbw_gbps(bytes, g, nodes);
        const double error = (projected - published) / published;
        if (use == "validation") errors.push_back(std::abs(error));
        std::printf("| %s | %s | %s | %d x %d | %.0f MiB | %.1f | %.1f | %+.1f%% | %s |\n", id.c_str(), use.c_str(),
                    hw.name.c_str(), nodes, g, bytes / 1048576.0, published, projected, 100.0 * error,
                    e["source"].as<std::string>().c_str());
    }
    ASSERT_GE(errors.size(), 3u);
    const double median = median_of(errors);
    std::printf("median |error| of %zu validation entries: %.1f%%\n", errors.size(), 100.0 * median);
    EXPECT_LT(median, kPublishedMedianBound);
}


struct PublishedRow {
    std::string id, baseline;
    std::string profile, config, precision, link;  // what a pair is matched on
    int gpus = 0;
    double published = 0, projected = 0;
    TrainConfig cfg;  // as projected
    HardwareProfile hw;
};

struct Band {
    double lo = INFINITY, hi = -INFINITY;
};

// The speed-up of row r over its 1-GPU baseline at every corner of r's profile ranges.
Band published_speedup_band(const PublishedRow& r, const PublishedRow& base) {
    Band band;
    for (const HardwareProfile& corner : range_corners(r.hw)) {
        const CostModel model(corner);
        const double speedup = project_workload(r.cfg, model, {r.gpus}, {1}).at(0).samples_per_s /
                               project_workload(base.cfg, model, {1}, {1}).at(0).samples_per_s;
        band.lo = std::min(band.lo, speedup);
        band.hi = std::max(band.hi, speedup);
    }
    return band;
}

// One file of published training throughputs (results/published/*_throughput.yaml): prints the
// table of published against projected samples/s and appends its rows.
void project_published(const std::string& file, std::vector<PublishedRow>& rows) {
    const YAML::Node root = YAML::LoadFile(kSource + "/results/published/" + file);
    ASSERT_TRUE(root["entries"].IsSequence()) << file;
    std::printf("%s:\n\n| entry | profile | model, seq, batch/GPU | GPUs | published samples/s | projected | error | scalebench's footprint | not modelled |\n"
                "| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n", file.c_str());
    for (const auto& e : root["entries"]) {
        const std::string id = e["id"].as<std::string>();
        ASSERT_EQ(e["use"].as<std::string>(), "validation") << id;
        for (const char* key : {"source", "configuration", "differences"})
            ASSERT_FALSE(e[key].as<std::string>().empty()) << id << ": " << key;
        const HardwareProfile hw =
            load_hardware_profile(kSource + "/configs/hardware/" + e["profile"].as<std::string>() + ".yaml");
        TrainConfig cfg = load_config_file(kSource + "/" + e["config"].as<std::string>());
        ASSERT_EQ(cfg.scaling_mode, ScalingMode::weak) << id;  // batch_size is per GPU, as published
        cfg.batch_size = e["batch_size"].as<int>();
        if (e["seq_len"]) cfg.transformer.shape.seq_len = e["seq_len"].as<int>();
        cfg.precision = parse_precision(e["precision"].as<std::string>());
        ASSERT_NE(cfg.precision, Precision::fp32) << id << ": published runs are mixed precision or TF32";
        cfg.grad_dtype = parse_grad_dtype(e["grad_dtype"].as<std::string>());
        cfg.conv_engine = ConvEngine::im2col;  // what the entries' differences describe, in any build
        validate_config(cfg);
        PublishedRow row{id,
                         e["baseline"] ? e["baseline"].as<std::string>() : "",
                         hw.name,
                         e["config"].as<std::string>(),
                         e["precision"].as<std::string>(),
                         link_class_name(hw.link),
                         e["gpus"].as<int>(),
                         e["samples_per_s"].as<double>(),
                         0,
                         {},
                         hw};
        const Projection p = project_workload(cfg, CostModel(hw), {row.gpus}, {1}).at(0);
        row.projected = p.samples_per_s;
        row.cfg = cfg;
        const double error = (row.projected - row.published) / row.published;
        const std::string model =
            cfg.model == "transformer"
                ? fmt::format("{}-{}, {}", p.record["model"].get<std::string>(),
                              cfg.transformer.shape.layers == 24 ? "large" : "base", cfg.transformer.shape.seq_len)
                : fmt::format("resnet{}, {}", cfg.resnet.blocks == std::vector<int>{3, 4, 6, 3} ? "50" : "",
                              cfg.resnet.image_size);
        // A batch whose step would not fit scalebench's footprint is marked, not left silent.
        const std::string fit = fmt::format("{:.1f} GiB{}", p.record["memory_per_gpu_gb"].get<double>(),
                                            p.record["fits_memory"].get<bool>() ? "" : " (does not fit)");
        std::printf("| [%s](%s) | %s | %s, %d | %d | %.1f | %.1f | %+.1f%% | %s | %s |\n", id.c_str(),
                    e["source"].as<std::string>().c_str(), hw.name.c_str(), model.c_str(), cfg.batch_size, row.gpus,
                    row.published, row.projected, 100.0 * error, fit.c_str(), e["differences"].as<std::string>().c_str());
        rows.push_back(row);
    }
    std::printf("\n");
}

std::vector<PublishedRow> all_published_rows() {
    std::vector<PublishedRow> rows;
    for (const char* file : {"bert_throughput.yaml", "resnet50_throughput.yaml"}) project_published(file, rows);
    return rows;
}

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

// The buyer's question, A100 against RTX 4090, from the one source that ran the same code on
// both (Lambda's deeplearning-benchmark, v1 series). The rule, written before the comparison
// (results/published/bert_throughput.yaml, resnet50_throughput.yaml headers): every pair of a
// Lambda v1 RTX 4090 row and a Lambda v1 A100 row (any A100 profile) of the same workload preset,
// precision and GPU count; each at its own published batch. The measure is the ratio of their
// throughputs, A100 over 4090, published against projected.
TEST(ProjectionValidation, LambdaA100OverRtx4090Ratios) {
    const std::vector<PublishedRow> rows = all_published_rows();
    std::vector<double> errors, bert, resnet;
    std::printf("| A100 row | RTX 4090 row | GPUs | published A100/4090 | projected | error |\n"
                "| --- | --- | --- | --- | --- | --- |\n");
    for (const PublishedRow& rtx : rows) {
        if (!starts_with(rtx.id, "lambda-rtx4090")) continue;
        for (const PublishedRow& a100 : rows) {
            const bool lambda_v1_a100 = starts_with(a100.id, "lambda-a100");
            if (!lambda_v1_a100 || a100.config != rtx.config || a100.precision != rtx.precision || a100.gpus != rtx.gpus)
                continue;
            const double published = a100.published / rtx.published, projected = a100.projected / rtx.projected;
            const double error = (projected - published) / published;
            errors.push_back(std::abs(error));
            (rtx.config.find("bert") != std::string::npos ? bert : resnet).push_back(std::abs(error));
            std::printf("| %s | %s | %d | %.2f | %.2f | %+.1f%% |\n", a100.id.c_str(), rtx.id.c_str(), rtx.gpus, published,
                        projected, 100.0 * error);
        }
    }
    ASSERT_EQ(errors.size(), 18u) << "the rule picks Lambda's 18 A100/4090 pairs";
    const double median = median_of(errors);
    std::printf("median |error| of %zu A100/4090 ratios: %.1f%% (BERT's %zu: %.1f%%, ResNet-50's %zu: %.1f%%; the issue's "
                "target: 10%%)\n\n",
                errors.size(), 100.0 * median, bert.size(), 100.0 * median_of(bert), resnet.size(), 100.0 * median_of(resnet));
    EXPECT_LT(median, kRatioMedianGuard);
}

// The 4090's two-GPU speed-ups without P2P (Lambda's script sets NCCL_P2P_DISABLE=1): the
// host-staged all-reduce and its overlap, each row at the central values and the band the
// profile's ranges give (staged copy rate, staged overlap).
TEST(ProjectionValidation, Rtx4090HostStagedSpeedups) {
    const std::vector<PublishedRow> rows = all_published_rows();
    std::printf("| entry | published speed-up | projected (central) | error | band (every range at its low end, high end) | published inside |\n"
                "| --- | --- | --- | --- | --- | --- |\n");
    int checked = 0, inside = 0;
    std::vector<double> errors;
    for (const PublishedRow& r : rows) {
        if (!starts_with(r.id, "lambda-rtx4090") || r.gpus != 2) continue;
        ASSERT_EQ(r.link, "host_staged") << r.id;
        const auto base = std::find_if(rows.begin(), rows.end(), [&](const PublishedRow& b) { return b.id == r.baseline; });
        ASSERT_NE(base, rows.end()) << r.id;
        const double published = r.published / base->published, projected = r.projected / base->projected;
        const Band band = published_speedup_band(r, *base);
        const double error = (projected - published) / published;
        errors.push_back(std::abs(error));
        const bool in = published >= band.lo - 1e-9 && published <= band.hi + 1e-9;
        inside += in;
        ++checked;
        std::printf("| %s | %.2f | %.2f | %+.1f%% | %.2f-%.2f | %s |\n", r.id.c_str(), published, projected, 100.0 * error,
                    band.lo, band.hi, in ? "yes" : "no");
    }
    ASSERT_EQ(checked, 4);
    std::printf("largest |error| at the central values: %.1f%% (the issue's target: 10%% each); published inside the band: %d of %d\n\n",
                100.0 * *std::max_element(errors.begin(), errors.end()), inside, checked);
    EXPECT_EQ(inside, checked);
    EXPECT_LT(*std::max_element(errors.begin(), errors.end()), kStagedSpeedupGuard);
}

// The "done when": the median error against published scaling figures. Two measures:
// the throughput itself, and the speed-up T(N) / T(1) against the same source's 1-GPU row.
TEST(ProjectionValidation, PublishedTrainingThroughput) {
    const std::vector<PublishedRow> rows = all_published_rows();
    std::vector<double> errors;
    for (const PublishedRow& r : rows) errors.push_back(std::abs((r.projected - r.published) / r.published));
    ASSERT_GE(errors.size(), 10u);
    const double median = median_of(errors);
    std::printf("median |error| of %zu published throughputs: %.1f%% (the issue's target: 20%%)\n\n", errors.size(),
                100.0 * median);

    std::vector<double> scaling_errors;
    std::printf("| entry | GPUs | published speed-up | projected | error |\n| --- | --- | --- | --- | --- |\n");
    for (const PublishedRow& r : rows) {
        if (r.baseline.empty()) continue;
        const auto base = std::find_if(rows.begin(), rows.end(), [&](const PublishedRow& b) { return b.id == r.baseline; });
        ASSERT_NE(base, rows.end()) << r.id << ": baseline " << r.baseline << " is not an entry";
        ASSERT_EQ(base->gpus, 1) << r.id;
        const double published = r.published / base->published, projected = r.projected / base->projected;
        const double error = (projected - published) / published;
        scaling_errors.push_back(std::abs(error));
        std::printf("| %s | %d | %.2f | %.2f | %+.1f%% |\n", r.id.c_str(), r.gpus, published, projected, 100.0 * error);
    }
    ASSERT_GE(scaling_errors.size(), 5u);
    const double scaling_median = median_of(scaling_errors);
    std::printf("median |error| of %zu published speed-ups: %.1f%%\n", scaling_errors.size(), 100.0 * scaling_median);
    EXPECT_LT(scaling_median, kPublishedMedianBound);
    EXPECT_LT(median, kThroughputGuard);
}

}  // namespace
}  // namespace sb
