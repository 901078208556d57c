// The projection of a sharded step (docs/sharding.md, docs/projection.md): it moves the bytes the
// runner's records measured and predicts the memory they used (the committed records of
// results/h200-sharding and results/cpu-2rank-vm/sharding);
// its reduce-scatter and all-gather cost half an all-reduce's ring at the same busbw on every link
// class; the step issues them where the runner does; each configuration runs in the first mode that
// fits its GPUs, by train's own memory prediction; and in the NLP fine-tuning scenario a card on
// which no mode fits wins nothing and is named.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/errors.h"
#include "src/core/config.h"
#include "src/core/rank_memory.h"
#include "src/projection/buyers_guide.h"
#include "src/projection/hardware.h"
#include "src/projection/projection.h"
#include "src/projection/workload_projection.h"

namespace sb {
namespace {

const std::string kSource = SCALEBENCH_SOURCE_DIR;

HardwareProfile profile(const std::string& name) {
    return load_hardware_profile(kSource + "/configs/hardware/" + name + ".yaml");
}

// The lines of a committed archive's members, as `tar -xzO` prints them.
std::vector<std::string> archive_lines(const std::string& archive, const std::vector<std::string>& members) {
    std::string command = "tar -xzOf '" + archive + "'";
    for (const std::string& m : members) command += " '" + m + "'";
    FILE* pipe = popen(command.c_str(), "r");
    if (!pipe) throw std::runtime_error("cannot run " + command);
    std::string text;
    char buffer[65536];
    for (size_t n; (n = fread(buffer, 1, sizeof buffer, pipe)) > 0;) text.append(buffer, n);
    if (pclose(pipe) != 0) throw std::runtime_error(command + " failed");
    std::vector<std::string> lines;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);)
        if (!line.empty()) lines.push_back(line);
    return lines;
}

std::vector<std::string> file_lines(const std::string& path) {
    std::ifstream in(path);
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);)
        if (!line.empty()) lines.push_back(line);
    return lines;
}

TEST(ShardedProjection, MovesTheBytesTheRecordsMeasured) {
    struct Source {
        std::string where;
        std::vector<std::string> lines;
    };
    const std::vector<Source> sources = {
        {"results/h200-sharding/details.tar.gz",
         archive_lines(kSource + "/results/h200-sharding/details.tar.gz",
                       {"./records/equiv-transformer.jsonl", "./records/equiv-resnet.jsonl", "./records/large.jsonl"})},
        {"results/cpu-2rank-vm/sharding/records.jsonl", file_lines(kSource + "/results/cpu-2rank-vm/sharding/records.jsonl")}};
    const CostModel model(profile("h200-sxm"));  // 8 GPUs a node: every world size of the records
    int sharded = 0, unsharded = 0, gathered = 0;
    for (const Source& source : sources)
        for (size_t i = 0; i < source.lines.size(); ++i) {
            const nlohmann::json r = nlohmann::json::parse(source.lines[i]);
            if (r.value("subcommand", "") != "train" || !r.contains("sharding")) continue;
            const std::string where = source.where + " record " + std::to_string(i + 1);
            const TrainConfig cfg = config_of_record(r, where);
            const int n = r["world_size"].get<int>();
            const nlohmann::json& measured = r["sharding"];
            // train's prediction recomputed from the record's own fields, of the engine that ran (its
            // conv_engine), is each kind measured.
            const RankMemory predicted = predict_rank_memory(cfg, n, r["local_batch"].get<int>());
            const nlohmann::json recomputed = to_json(predicted), measured_memory = r["memory_per_rank"]["measured"];
            for (const char* kind : {"parameters", "gradients", "optimizer_state", "activations", "comm_buffers", "data"})
                EXPECT_DOUBLE_EQ(recomputed[kind].get<double>(), measured_memory[kind].get<double>()) << where << " " << kind;
            EXPECT_NEAR(measured_memory["peak_total"].get<double>() / predicted.total(), 1.0, 0.01) << where;
            const Projection p = project_workload(cfg, model, {n}, {1}).front();
            const nlohmann::json& projected = p.record["sharding"];
            ASSERT_EQ(projected["mode"], measured["mode"]) << where;
            EXPECT_EQ(p.record["local_batch"], r["local_batch"]) << where;
            EXPECT_EQ(p.record["buckets"], r["buckets"]) << where;
            EXPECT_DOUBLE_EQ(p.record["gradient_bytes"].get<double>(), r["gradient_bytes"].get<double>()) << where;
            // The footprint less the GPU's workspace and reserve against the high-water mark of the run's
            // own allocations, within the 5% train's prediction is held to.
            const double footprint = (p.record["memory_per_gpu_gb"].get<double>() -
                                      p.record["memory_breakdown_gb"]["workspace_and_runtime"].get<double>()) * kGiB;
            EXPECT_NEAR(footprint / measured_memory["peak_total"].get<double>(), 1.0, 0.05) << where;
            if (measured["mode"] == "none") {
                ++unsharded;
                EXPECT_TRUE(p.record["allreduce_ms"].is_number()) << where;
                continue;
            }
            ++sharded;
            EXPECT_TRUE(p.record["allreduce_ms"].is_null()) << where;  // as the record: no all-reduce
            EXPECT_EQ(projected["shard_elements"], measured["shard_elements"]) << where;
            for (const char* c : {"reduce_scatter", "all_gather"})
                EXPECT_DOUBLE_EQ(projected[c]["bytes"].get<double>(), measured[c]["bytes"].get<double>()) << where << " " << c;
            if (measured["mode"] == "parameters") {  // the same buckets gathered as the runner's step read them
                ++gathered;
                EXPECT_EQ(projected["gathered_buckets"], measured["gathered_buckets"]) << where;
            }
        }
    // The H200 call's 14 sharded records (BERT and ResNet in three modes at 2 and 4 ranks, four of
    // them in `parameters`; GPT-2 large in two modes at 2) and the CPU run's 6, padded and not (one
    // in `parameters`); an unsharded record of each.
    EXPECT_EQ(sharded, 20);
    EXPECT_GE(unsharded, 2);
    EXPECT_EQ(gathered, 5);
}

TEST(ShardedProjection, ReduceScatterAndAllGatherAreHalfAnAllReducesRingOnEveryLink) {
    const double bytes = 1024.0 * 1024 * 1024;
    for (const char* name : {"a100-sxm4-40gb", "rtx4090-24gb-pcie4-p2p", "rtx4090-24gb-pcie4"}) {
        const CostModel m(profile(name));  // nvlink, pcie_p2p, host_staged
        const double alpha = m.hw.bucket_launch_us.value * 1e-3, latency = m.hw.link_latency_us.value * 1e-3;
        for (int g : {2, 4, 8}) {
            const double rs = m.collective_ms(Collective::reduce_scatter, bytes, g, 1);
            EXPECT_NEAR(rs, alpha + (g - 1) * latency + (g - 1.0) / g * bytes / (m.ring_busbw_gbps(g) * 1e9) * 1e3, 1e-9)
                << name << " " << g;
            EXPECT_DOUBLE_EQ(m.collective_ms(Collective::all_gather, bytes, g, 1), rs) << name << " " << g;
            // The all-reduce moves twice the bytes through the same ring.
            const double ar = m.collective_ms(Collective::all_reduce, bytes, g, 1);
            EXPECT_NEAR(ar - alpha - 2 * (g - 1) * latency, 2 * (rs - alpha - (g - 1) * latency), 1e-9) << name << " " << g;
            // nccl-tests' busbw of either, bytes / time x (n-1)/n: the ring's, less the latency's share.
            const double busbw = bytes / (rs * 1e-3) / 1e9 * (g - 1) / g;
            EXPECT_LT(busbw, m.ring_busbw_gbps(g)) << name;
            EXPECT_GT(busbw, 0.99 * m.ring_busbw_gbps(g)) << name;
        }
        // One GPU: the out-of-place reduce-scatter copies its bytes; the in-place all-gather moves none.
        EXPECT_NEAR(m.collective_ms(Collective::reduce_scatter, bytes, 1, 1), alpha + 2 * bytes / (m.memory_gbps() * 1e9) * 1e3,
                    1e-9);
        EXPECT_DOUBLE_EQ(m.collective_ms(Collective::all_gather, bytes, 1, 1), alpha);
        // Two nodes add half the all-reduce's ring between them: each GPU's 1/g over its share of the NICs.
        const HardwareProfile& hw = m.hw;
        const double per_gpu = hw.nic_gbps.value * hw.nics_per_node.value / 8 * hw.network_efficiency.value;
        EXPECT_NEAR(m.collective_ms(Collective::reduce_scatter, bytes, 8, 2) - m.collective_ms(Collective::reduce_scatter, bytes, 8, 1),
                    hw.network_latency_us.value * 1e-3 + 0.5 * bytes / 8 / (per_gpu * 1e9) * 1e3, 1e-9)
            << name;
    }
}

TrainConfig small_mlp(ShardingMode mode, Precision precision) {
    TrainConfig cfg;
    cfg.model = "mlp";
    cfg.mlp.input_dim = 64;
    cfg.mlp.hidden = {256, 256, 256};
    cfg.mlp.num_classes = 10;
    cfg.bucket_mb = 0.05;  // several buckets
    cfg.sharding = mode;
    cfg.precision = precision;
    validate_config(cfg);
    return cfg;
}

TEST(ShardedProjection, TheStepReduceScattersAsBucketsLandAndGathersAfterTheOptimizer) {
    for (Precision precision : {Precision::fp32, Precision::bf16}) {
        const TrainConfig cfg = small_mlp(ShardingMode::optimizer, precision);
        const int n = 3;  // pads buckets
        const StepTrace t = trace_step(cfg, 32, TraceOps::default_trace_limits(), n);
        ASSERT_GT(t.buckets, 1u);
        size_t scatters = 0, gathers = 0, updates = 0;
        for (const TracedCollective& c : t.collectives) {
            EXPECT_NE(c.kind, Collective::all_reduce);
            if (c.kind == Collective::reduce_scatter) {
                ++scatters;  // as its bucket lands, waited for where the backward ends
                EXPECT_LE(c.issued_after, t.backward_end);
                EXPECT_EQ(c.waited_at, t.backward_end);
            } else {
                ++gathers;  // after the shard's update, into the slots the next forward reads
                EXPECT_GT(c.issued_after, t.optimizer_begin);
                EXPECT_LE(c.waited_at, t.ops.size());
            }
        }
        for (size_t i = t.optimizer_begin; i < t.ops.size(); ++i) updates += t.ops[i].kind == "adamw_step";
        EXPECT_EQ(scatters, t.buckets);
        EXPECT_EQ(gathers, t.buckets);
        EXPECT_EQ(updates, 1u);  // the rank's shard, its slices of every bucket back to back
        // nccl-tests' size of either: every bucket's padded span, n slices; the reduce-scatter in
        // fp32, the all-gather in the compute dtype.
        const double gathered_bytes = precision == Precision::fp32 ? 4.0 : 2.0;
        EXPECT_DOUBLE_EQ(t.collective_bytes(Collective::reduce_scatter), 4.0 * n * t.shard_elements);
        EXPECT_DOUBLE_EQ(t.collective_bytes(Collective::all_gather), gathered_bytes * n * t.shard_elements);
        EXPECT_GT(4.0 * n * t.shard_elements, t.gradient_bytes);  // padded

        const CostModel m(profile("a100-sxm4-40gb"));
        const ProjectedStep s = schedule_step(t, m, n, 1);
        double rs = 0, ag = 0;
        for (const TracedCollective& c : t.collectives)
            (c.kind == Collective::reduce_scatter ? rs : ag) += m.collective_ms(c.kind, c.bytes, n, 1);
        EXPECT_DOUBLE_EQ(s.reduce_scatter_ms, rs);
        EXPECT_DOUBLE_EQ(s.all_gather_ms, ag);
        EXPECT_EQ(s.allreduce_ms, 0.0);
        EXPECT_GE(s.optimizer_ms, ag);  // the step waits for the all-gathers inside its optimizer phase
    }
}

TEST(ShardedProjection, EachConfigurationRunsInTheFirstModeThatFitsByTrainsPrediction) {
    const TrainConfig xl = load_config_file(kSource + "/configs/gpt2-xl.yaml");  // batch 2
    const std::vector<ShardingMode> modes = {ShardingMode::none, ShardingMode::optimizer, ShardingMode::gradients};
    const HardwareProfile small = profile("rtx4090-24gb-pcie4");
    const std::vector<Projection> rows = project_workload(xl, CostModel(small), {1, 2, 4, 8}, {1}, modes);
    for (const Projection& p : rows) {
        ASSERT_EQ(p.fits.size(), 3u);
        for (const ModeFit& f : p.fits) {
            TrainConfig c = xl;
            c.sharding = f.mode;
            EXPECT_DOUBLE_EQ(f.footprint_bytes, footprint_bytes(predict_rank_memory(c, p.step.world_size, 2)));
            EXPECT_EQ(f.fits, f.footprint_bytes <= 24 * kGiB);
        }
        EXPECT_EQ(p.record["sharding_fit"].size(), 3u);
        EXPECT_EQ(p.record["config"]["sharding"], sharding_mode_name(p.sharding));
    }
    // 24 GiB: a replica (32.8 GiB) fits nowhere; the optimizer's shard fits from 4 ranks, the
    // gradients' (whose gradients land in a few bucket slots) from 2. Where no mode fits the
    // configuration runs in the one nearest to fitting and says it does not fit.
    EXPECT_EQ(rows[3].sharding, ShardingMode::optimizer);
    EXPECT_TRUE(rows[3].fits_memory());
    EXPECT_EQ(rows[2].sharding, ShardingMode::optimizer);
    EXPECT_TRUE(rows[2].fits_memory());
    EXPECT_EQ(rows[1].sharding, ShardingMode::gradients);
    EXPECT_TRUE(rows[1].fits_memory());
    EXPECT_EQ(rows[0].sharding, ShardingMode::none);  // at one rank a shard is all of it, plus its copy
    EXPECT_FALSE(rows[0].fits_memory());
    // 48 GiB: the replica fits at every count, so nothing is sharded.
    for (const Projection& p : project_workload(xl, CostModel(profile("rtx4090-48gb-pcie4")), {1, 2, 4, 8}, {1}, modes)) {
        EXPECT_EQ(p.sharding, ShardingMode::none);
        EXPECT_TRUE(p.fits_memory());
    }
}

TEST(ShardedProjection, ShardedFiguresCarryTheBandsOfTheProfilesRanges) {
    TrainConfig xl = load_config_file(kSource + "/configs/gpt2-xl.yaml");  // sharding: optimizer
    const HardwareProfile staged = profile("rtx4090-24gb-pcie4");         // its link efficiency is a range
    std::vector<Projection> rows = project_workload(xl, CostModel(staged), {8}, {1});
    widen_to_ranges(rows, xl, staged, Calibration{}, {8}, {1});
    const Projection& p = rows.front();
    ASSERT_EQ(p.sharding, ShardingMode::optimizer);
    const nlohmann::json& bands = p.record["bands"];
    EXPECT_FALSE(bands.contains("allreduce_busbw_gbps"));  // named for what it is
    const std::pair<const char*, double> figures[] = {{"sharding_busbw_gbps", p.busbw},
                                                      {"samples_per_s", p.samples_per_s},
                                                      {"exposed_comm_ms", p.step.exposed_comm_ms}};
    for (const auto& [key, central] : figures) {
        ASSERT_TRUE(bands.contains(key)) << key;
        EXPECT_LE(bands[key][0].get<double>(), central + 1e-9) << key;
        EXPECT_GE(bands[key][1].get<double>(), central - 1e-9) << key;
        EXPECT_LT(bands[key][0].get<double>(), bands[key][1].get<double>()) << key;  // the ranges move it
    }
    EXPECT_NEAR(p.busbw, p.record["sharding"]["busbw_gbps"].get<double>(), 1e-12);
}

TEST(ShardedProjection, InTheNlpScenarioACardOnWhichNoModeFitsWinsNothingAndIsNamed) {
    const std::string configs = kSource + "/configs";
    const Scenario nlp = load_scenario(configs + "/scenarios/nlp-fine-tuning.yaml", configs);
    ASSERT_EQ(nlp.sharding, (std::vector<ShardingMode>{ShardingMode::none, ShardingMode::optimizer,
                                                       ShardingMode::gradients, ShardingMode::parameters}));
    ASSERT_EQ(nlp.workloads.back(), configs + "/gpt2-xl.yaml");
    const TrainConfig xl = load_config_file(nlp.workloads.back());
    const std::vector<HardwareProfile> cards = {profile("a100-sxm4-40gb"), profile("rtx4090-24gb-pcie4"),
                                                profile("rtx4090-48gb-pcie4")};
    CompareSetup setup;
    setup.sharding = nlp.sharding;
    // Without the bands (a key no profile ranges): the rules, not the ranges, are what this reads.
    const std::vector<CompareRow> rows = compare_rows(xl, cards, std::vector<Calibration>(3), "-", false, setup);
    // At the scenario's 4 GPUs: the A100 40GB and the 48 GB 4090 hold the replica; the 24 GB 4090
    // fits by sharding its optimizer state.
    EXPECT_EQ(rows[0].at(4)->sharding, ShardingMode::none);
    EXPECT_TRUE(rows[0].at(4)->fits_memory());
    EXPECT_EQ(rows[2].at(4)->sharding, ShardingMode::none);
    EXPECT_TRUE(rows[2].at(4)->fits_memory());
    EXPECT_EQ(rows[1].at(4)->sharding, ShardingMode::optimizer);
    EXPECT_TRUE(rows[1].at(4)->fits_memory());
    // At 2 GPUs only with its gradients sharded too.
    EXPECT_EQ(rows[1].at(2)->sharding, ShardingMode::gradients);
    EXPECT_TRUE(rows[1].at(2)->fits_memory());
    // On one GPU the 24 GB card fits no mode (a shard of one is all of it): it wins nothing, and the
    // verdict names it with each mode's footprint.
    ScenarioRule one = nlp.rule;
    one.gpus = 1;
    for (Score score : kBudgets) {
        one.score = score;
        const Verdict v = decide(rows, one);
        ASSERT_NE(v.winner, nullptr);
        EXPECT_NE(v.winner->hw.name, "rtx4090-24gb-pcie4");
        EXPECT_NE(v.reason.find("does not fit: rtx4090-24gb-pcie4 at 1 GPU (none 32.83, optimizer 38.64, gradients "
                                "33.75, parameters 31.15 GiB per GPU of 24)"),
                  std::string::npos)
            << v.reason;
    }
    // The 24 GB card alone: no winner, and why.
    const std::vector<CompareRow> alone = compare_rows(xl, {cards[1]}, {Calibration{}}, "-", false, setup);
    const Verdict v = decide(alone, one);
    EXPECT_EQ(v.winner, nullptr);
    EXPECT_EQ(v.reason.rfind("the workload fits none; does not fit: rtx4090-24gb-pcie4 at 1 GPU", 0), 0u) << v.reason;
}

TEST(ShardedProjection, AScenariosShardingKeyIsReadAndBadOnesRefusedAtTheirLine) {
    const std::string configs = kSource + "/configs";
    const auto dir = std::filesystem::temp_directory_path() / "sb-sharded-scenario-test";
    std::filesystem::create_directories(dir);
    auto refused = [&](const std::string& modes) {
        const std::string path = (dir / "bad.yaml").string();
        std::ofstream(path) << "scenario: x\ngpus: 4\nworkloads: [ci-small.yaml]\nsharding: " << modes << "\n";
        try {
            load_scenario(path, configs);
        } catch (const UserError& e) {
            return std::string(e.what());
        }
        return std::string("accepted");
    };
    EXPECT_EQ(refused("[optimizer, none]"), "accepted");
    EXPECT_NE(refused("[none, zero3]").find("bad.yaml:4:"), std::string::npos);
    EXPECT_NE(refused("[none, zero3]").find("optimizer"), std::string::npos);  // the valid names
    EXPECT_EQ(refused("[none, gradients, parameters]"), "accepted");
    EXPECT_NE(refused("[none, none]").find("given twice"), std::string::npos);
    EXPECT_NE(refused("[]").find("a list of sharding modes"), std::string::npos);
    std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace sb
