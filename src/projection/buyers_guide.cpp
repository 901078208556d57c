// The buyer's guide (src/projection/buyers_guide.h).
#include "src/projection/buyers_guide.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <optional>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/errors.h"
#include "src/core/choices.h"
#include "src/core/files.h"
#include "src/core/workload.h"
#include "src/core/yaml_fields.h"
#include "src/projection/record_scan.h"
#include "src/projection/shipped_configs.h"

namespace sb {

namespace {

// The entry of by_gpus (one node) of `gpus` GPUs, or of the node's largest count below; none
// where every projected count is above.
std::optional<size_t> index_of(const CompareRow& r, int gpus) {
    std::optional<size_t> best_index;
    for (size_t i = 0; i < r.by_gpus.size(); ++i)
        if (r.by_gpus[i].step.world_size <= gpus) best_index = i;
    return best_index;
}

// What a scenario judges of a row: the configuration (an entry of by_gpus or on_nodes) and the score.
struct Judged {
    const CompareRow* row = nullptr;
    const Projection* p = nullptr;
    double score = 0, lo = 0, hi = 0;  // central, and the band the row's ranges but the compute model's error give it
    double full_lo = 0, full_hi = 0;   // the band with the compute model's error on this GPU as well
    double cost() const { return p->step.world_size * row->hw.price_usd.value; }
};

// The configuration a rule of `gpus` GPUs judges in a row: that many GPUs per node or the node's
// largest count below, on the row's N nodes when it has them and the rule is multi-GPU; its band.
// The band is the one without the compute model's error: the verdict judges cards against each other,
// and that error is largely shared between them (docs/projection.md, Bands).
std::pair<const Projection*, Band> judged_configuration(const CompareRow& r, int gpus) {
    const std::optional<size_t> i = index_of(r, gpus);
    const bool across = gpus > 1 && !r.on_nodes.empty();
    const Projection& p = !i ? r.one_gpu() : across ? r.on_nodes[*i] : r.by_gpus[*i];
    return {&p, p.bands.samples_per_s_without_compute_error};
}

}  // namespace

std::vector<ScenarioRule> single_workload_rules() {
    return {{"small experiments", 1, Score::per_10k_gpus, {}},
            {"NLP fine-tuning", 4, Score::per_10k_gpus, {}},
            {"large CV training", 1 << 20, Score::per_10k_gpus, {}},
            {"multi-GPU training", 1 << 20, Score::samples_per_s, {}}};
}

double CompareRow::per_kw(const Projection& p) const {
    const int g = p.step.world_size;
    const double host_share = static_cast<double>(g) / hw.gpus_per_node.value * hw.host_power_w.value;
    return p.samples_per_s / ((g * hw.tdp_w.value + host_share) / 1e3);
}

ConfigurationCost configuration_cost(const HardwareProfile& hw, int gpus, const CostTerms& terms) {
    const double share = static_cast<double>(gpus) / hw.gpus_per_node.value;
    const double watts = gpus * hw.tdp_w.value + share * hw.host_power_w.value;
    return {gpus * hw.price_usd.value, share * hw.server_usd.value,
            watts / 1e3 * terms.years * 365.25 * 24 * terms.usd_per_kwh};
}

std::string configuration_name(const Projection& p) {
    const int g = p.step.world_size;
    return fmt::format("{} GPU{}{}", g, g > 1 ? "s" : "",
                       p.step.nodes > 1 ? fmt::format(" on {} nodes x {}", p.step.nodes, g / p.step.nodes) : "");
}

std::string unmet_requirements(const HardwareProfile& hw, const std::vector<std::string>& needs) {
    std::string out;
    auto add = [&](const std::string& why) { out += (out.empty() ? "" : ", ") + why; };
    for (const std::string& need : needs) {
        if (need == "soak") continue;  // the soaks of its GPU: decide judges them
        if (need == "vendor_driver" && hw.patched_driver) add("needs a patched driver");
        else if (need != "vendor_driver" && !hw.has_production()) add("records no production facts");
        else if (need == "ecc" && hw.ecc.value != "yes") add("ECC " + hw.ecc.value + " (not on by default)");
        else if (need == "datacenter_use" && hw.datacenter_use.value != "yes") add("no datacenter support or licence");
    }
    return out;
}

std::vector<Verdict> verdicts(const std::vector<CompareRow>& rows) {
    std::vector<Verdict> out;
    for (const ScenarioRule& rule : single_workload_rules()) out.push_back(decide(rows, rule));
    return out;
}

namespace {

// ", sharding optimizer" where the configuration is sharded or chose its mode among several.
std::string mode_said(const Projection& p) {
    return p.sharding == ShardingMode::none && p.fits.empty() ? "" : fmt::format(", sharding {}", sharding_mode_name(p.sharding));
}

// What a sharded configuration's collectives take per step: ", reduce-scatter 3.1 + all-gather 2.9 ms per step".
std::string sharded_cost(const Projection& p) {
    if (p.sharding == ShardingMode::none) return "";
    return fmt::format(", reduce-scatter {:.2f} + all-gather {:.2f} ms per step", p.step.reduce_scatter_ms,
                       p.step.all_gather_ms);
}

}  // namespace

std::string footprints(const Projection& p, const HardwareProfile& hw) {
    if (p.fits.empty())
        return fmt::format("{:.2f} GiB per GPU of {:.0f}", p.record["memory_per_gpu_gb"].get<double>(), hw.memory_gb.value);
    std::string out;
    for (const ModeFit& f : p.fits) out += fmt::format("{}{} {:.2f}", out.empty() ? "" : ", ", sharding_mode_name(f.mode), f.footprint_bytes / kGiB);
    return fmt::format("{} GiB per GPU of {:.0f}", out, hw.memory_gb.value);
}

namespace {

// Where the winner's band with the compute model's error is wider than its lead over the next profile:
// the verdict rests on the cards' relative compute, which that band does not decide.
std::string undecided_lead(const Judged& pick, const std::vector<Judged>& eligible) {
    const Judged* next = nullptr;
    for (const Judged& j : eligible)
        if (j.row != pick.row && (!next || j.score > next->score)) next = &j;
    if (!next) return "";
    const double lead = pick.score - next->score;
    if (pick.full_hi - pick.full_lo <= std::abs(lead)) return "";
    return fmt::format("; the band with the compute model's error ({:.1f}-{:.1f}) is wider than the lead over {} "
                       "({:+.1f}): the verdict rests on the cards' relative compute",
                       pick.full_lo, pick.full_hi, next->row->hw.name, lead);
}

}  // namespace

Verdict decide(const std::vector<CompareRow>& rows, const ScenarioRule& rule, const CostTerms& terms) {
    // The scaling floor: a multi-GPU configuration slower than one GPU of a compared profile (that
    // the workload fits) is no multi-GPU answer; that one GPU is. One GPU of each profile is
    // projected whatever GPU counts were asked (CompareRow::one_gpu()).
    double fastest_single = 0;
    const CompareRow* fastest_row = nullptr;
    for (const CompareRow& r : rows)
        if (r.one_gpu().fits_memory() && r.one_gpu().samples_per_s > fastest_single) {
            fastest_single = r.one_gpu().samples_per_s;
            fastest_row = &r;
        }
    auto scale = [&](const CompareRow& r, const Projection& p) {
        const int g = p.step.world_size;
        switch (rule.score) {
            case Score::samples_per_s: return 1.0;
            case Score::per_10k_gpus: return 1e4 / (g * r.hw.price_usd.value);
            case Score::per_10k_whole_cost: return 1e4 / configuration_cost(r.hw, g, terms).total();
        }
        return 1.0;
    };
    std::vector<Judged> eligible;
    std::string excluded, unfit;
    const bool judges_soaks = std::find(rule.needs.begin(), rule.needs.end(), "soak") != rule.needs.end();
    for (const CompareRow& r : rows) {
        std::string unmet = unmet_requirements(r.hw, rule.needs);
        if (judges_soaks)
            if (const SoakVerdict soak = soak_verdict(r.soaks, rule.soak_drift_bound_pct);
                soak.status == SoakVerdict::Status::counts_against)
                unmet += (unmet.empty() ? "" : ", ") + soak.said;
        if (!unmet.empty()) {
            excluded += fmt::format("{}{}: {}", excluded.empty() ? "" : "; ", r.hw.name, unmet);
            continue;
        }
        const auto [p, band] = judged_configuration(r, rule.gpus);
        if (!p->fits_memory()) {
            unfit += fmt::format("{}{} at {} ({})", unfit.empty() ? "" : "; ", r.hw.name, configuration_name(*p),
                                 footprints(*p, r.hw));
            continue;
        }
        if (p->step.world_size > 1 && p->samples_per_s <= fastest_single) continue;
        const double k = scale(r, *p);
        eligible.push_back({&r, p, p->samples_per_s * k, band.lo * k, band.hi * k, p->bands.samples_per_s.lo * k,
                            p->bands.samples_per_s.hi * k});
    }
    if (eligible.empty()) {
        std::string why = std::none_of(rows.begin(), rows.end(), [&](const CompareRow& r) {
                              return judged_configuration(r, rule.gpus).first->fits_memory();
                          })
                              ? "the workload fits none"
                              : "every multi-GPU configuration is slower than one GPU of a compared profile";
        if (!excluded.empty()) why = "none qualifies (" + excluded + ")";
        if (!unfit.empty()) why += "; does not fit: " + unfit;
        return {rule.scenario, nullptr, why};
    }
    auto higher = [](const Judged& a, const Judged& b) { return a.score < b.score; };
    // A profile reported not to work is shown beside the verdict, never crowned: the verdict is the
    // best of the others (unless every candidate is caveated so).
    const Judged overall = *std::max_element(eligible.begin(), eligible.end(), higher);
    std::vector<Judged> working;
    std::copy_if(eligible.begin(), eligible.end(), std::back_inserter(working),
                 [](const Judged& j) { return !j.row->hw.reported_failing(); });
    const bool all_failing = working.empty();
    if (!all_failing) eligible = working;
    const Judged best = *std::max_element(eligible.begin(), eligible.end(), higher);
    // The tie: every candidate the bands (or kTieWithin) cannot tell from the best, each central value
    // inside the other's band; it goes to the cheaper configuration, then to the one without a
    // patched driver.
    std::vector<Judged> tied;
    for (const Judged& j : eligible) {
        const bool inside_each_other = j.hi >= best.score && j.score >= best.lo;
        if (inside_each_other || j.score >= (1 - kTieWithin) * best.score) tied.push_back(j);
    }
    auto cost = [&](const Judged& j) {
        const int g = j.p->step.world_size;
        return rule.score == Score::per_10k_whole_cost ? configuration_cost(j.row->hw, g, terms).total() : j.cost();
    };
    const Judged pick = *std::min_element(tied.begin(), tied.end(), [&](const Judged& a, const Judged& b) {
        if (cost(a) != cost(b)) return cost(a) < cost(b);
        if (a.row->hw.patched_driver != b.row->hw.patched_driver) return !a.row->hw.patched_driver;
        return a.score > b.score;
    });
    const Projection& p = *pick.p;
    const char* unlisted = ", projected though not among the GPU counts asked";
    const char* what = rule.score == Score::samples_per_s     ? "samples/s"
                       : rule.score == Score::per_10k_gpus ? "samples/s per $10k"
                                                           : "samples/s per $10k of the whole cost";
    std::string reason = fmt::format(
        "{} {} at {}{} ({:.1f} [{:.1f}-{:.1f}], {:.1f}% scaling, {:.2f} ms exposed communication{}, {:.2f} of {:.0f} GiB "
        "per GPU, {:.1f} samples/s per kW)",
        what, rule.score == Score::samples_per_s ? "highest" : "best", configuration_name(p), mode_said(p), pick.score,
        pick.lo, pick.hi, 100.0 * p.efficiency, p.step.exposed_comm_ms, sharded_cost(p),
        p.record["memory_per_gpu_gb"].get<double>(), pick.row->hw.memory_gb.value, pick.row->per_kw(p));
    if (pick.row != best.row)
        reason += fmt::format("; ties with {} ({:.1f} [{:.1f}-{:.1f}]) within the band and costs less or needs no patched "
                              "driver",
                              best.row->hw.name, best.score, best.lo, best.hi);
    if (p.step.world_size > 1)
        reason += fastest_row ? fmt::format("; faster than the fastest single GPU compared ({:.1f} samples/s{})", fastest_single,
                                            fastest_row->at(1) ? "" : unlisted)
                              : "; the workload fits one GPU of no compared profile, so no scaling floor applies";
    else if (!pick.row->at(1))
        reason += fmt::format("; 1 GPU{}", unlisted);
    reason += undecided_lead(pick, eligible);
    if (judges_soaks) {
        const SoakVerdict soak = soak_verdict(pick.row->soaks, rule.soak_drift_bound_pct);
        reason += "; soak " + soak.brief;
    }
    if (all_failing)
        reason += "; every qualifying profile has a caveat reporting its setup failing: this is no recommendation";
    else if (overall.row->hw.reported_failing() && overall.row != pick.row)
        for (const Caveat& c : overall.row->hw.caveats)
            if (c.reported_failing)
                reason += fmt::format("; beside it, not crowned: {} at {} ({:.1f} [{:.1f}-{:.1f}]), reported failing: {} ({})",
                                      overall.row->hw.name, configuration_name(*overall.p), overall.score, overall.lo,
                                      overall.hi, c.text, c.source);
    // What the winner's figures rest on: said beside every verdict it wins.
    for (const Caveat& c : pick.row->hw.caveats) reason += fmt::format("; caveat: {} ({})", c.text, c.source);
    if (!excluded.empty()) reason += "; excluded: " + excluded;
    if (!unfit.empty()) reason += "; does not fit: " + unfit;
    return {rule.scenario, pick.row, reason};
}

namespace {

std::string winner_name(const Verdict& v) { return v.winner ? v.winner->hw.name : std::string("none"); }

}  // namespace

std::vector<CompareRow> compare_rows(const TrainConfig& cfg, const std::vector<HardwareProfile>& profiles,
                                     const std::vector<Calibration>& calibrations, const std::string& key, bool high,
                                     const CompareSetup& setup, size_t moved) {
    std::vector<CompareRow> rows;
    for (size_t i = 0; i < profiles.size(); ++i) {
        const std::vector<std::string> ranged = ranged_keys(profiles[i]);
        const bool at_end = i == moved && !key.empty() && std::find(ranged.begin(), ranged.end(), key) != ranged.end();
        CompareRow row;
        row.hw = at_end ? at_range_end(profiles[i], key, high) : profiles[i];
        if (i < setup.soaks.size()) row.soaks = setup.soaks[i];
        const std::vector<int> gpus = projected_gpu_counts(setup.gpus, row.hw);
        // One node, then (--nodes N) the same GPU counts on N nodes: project's code path, whose
        // records say nodes and gpus_per_node.
        const std::vector<int> nodes = setup.nodes > 1 ? std::vector<int>{1, setup.nodes} : std::vector<int>{1};
        TraceCache traces;  // one workload on one GPU: shared by the corners of its ranges
        const CostModel model(row.hw, calibrations[i], setup.real_input);
        auto project = [&](const std::vector<int>& counts, const std::vector<int>& node_counts) {
            std::vector<Projection> out = project_workload(cfg, model, counts, node_counts, setup.sharding, &traces);
            if (key.empty())
                widen_to_ranges(out, cfg, row.hw, calibrations[i], counts, node_counts, setup.real_input, setup.sharding,
                                &traces);
            return out;
        };
        std::vector<Projection> all = project(gpus, nodes);
        row.on_nodes.assign(all.begin() + static_cast<std::ptrdiff_t>(gpus.size()), all.end());
        all.resize(gpus.size());
        row.by_gpus = std::move(all);
        if (!row.at(1)) row.one_gpu_unlisted = project({1}, {1}).front();
        rows.push_back(std::move(row));
    }
    return rows;
}

namespace {

// Profiles of one physical card: the same GPU and memory (a node's fabric is what differs).
bool same_card(const HardwareProfile& a, const HardwareProfile& b) {
    return a.device_name == b.device_name && a.memory_gb.value == b.memory_gb.value;
}

// The profiles a ranged number moves together: a GPU's number (gpu.*) moves in every profile of the
// same card that has it; a node's number only in its own profile.
std::vector<size_t> moved_together(const std::vector<HardwareProfile>& profiles, size_t i, const std::string& key) {
    if (key.rfind("gpu.", 0) != 0) return {i};
    std::vector<size_t> out;
    for (size_t j = 0; j < profiles.size(); ++j) {
        const std::vector<std::string> ranged = ranged_keys(profiles[j]);
        if (same_card(profiles[j], profiles[i]) && std::find(ranged.begin(), ranged.end(), key) != ranged.end())
            out.push_back(j);
    }
    return out;
}

// The row of `banded`'s profile with a number at one end, judged with `banded`'s bands: a flip is
// decided as the verdict is.
CompareRow with_bands_of(CompareRow moved, const CompareRow& banded) {
    for (size_t k = 0; k < moved.by_gpus.size() && k < banded.by_gpus.size(); ++k) moved.by_gpus[k].bands = banded.by_gpus[k].bands;
    for (size_t k = 0; k < moved.on_nodes.size() && k < banded.on_nodes.size(); ++k)
        moved.on_nodes[k].bands = banded.on_nodes[k].bands;
    if (moved.one_gpu_unlisted && banded.one_gpu_unlisted) moved.one_gpu_unlisted->bands = banded.one_gpu_unlisted->bands;
    return moved;
}

}  // namespace

std::vector<std::vector<std::string>> verdict_flips(const TrainConfig& cfg, const std::vector<HardwareProfile>& profiles,
                                                    const std::vector<Calibration>& calibrations,
                                                    const std::vector<Verdict>& central,
                                                    const std::vector<ScenarioRule>& rules, const CostTerms& terms,
                                                    const CompareSetup& setup) {
    std::vector<std::vector<std::string>> flips(central.size());
    // The rows as the verdict judged them, with their bands.
    const std::vector<CompareRow> given = compare_rows(cfg, profiles, calibrations, "", false, setup);
    for (size_t i = 0; i < profiles.size(); ++i) {
        HardwareProfile profile = profiles[i];
        for (const auto& [key, number] : sourced_numbers(profile))
            for (bool high : {false, true}) {
                const double end = high ? number->hi : number->lo;
                if (!number->is_range() || end == number->value) continue;  // an end at the central value changes nothing
                // The compute model's error is shared between the cards more than not: the verdict's
                // note says where its band is wider than the lead instead (undecided_lead).
                if (key == "gpu.compute_error_pct") continue;
                const std::vector<size_t> together = moved_together(profiles, i, key);
                if (together.front() != i) continue;  // moved with an earlier profile of the same card
                std::vector<CompareRow> moved = given;
                std::string names;
                for (size_t j : together) {
                    CompareSetup alone = setup;  // profile j's own soaks
                    alone.soaks = j < setup.soaks.size() ? std::vector<std::vector<SoakRun>>{setup.soaks[j]}
                                                         : std::vector<std::vector<SoakRun>>{};
                    moved[j] = with_bands_of(compare_rows(cfg, {profiles[j]}, {calibrations[j]}, key, high, alone).front(), given[j]);
                    names += (names.empty() ? "" : " and ") + profiles[j].name;
                }
                for (size_t s = 0; s < central.size(); ++s)
                    if (const Verdict v = decide(moved, rules[s], terms); winner_name(v) != winner_name(central[s]))
                        flips[s].push_back(fmt::format("{} with {}'s {} at its {} end ({:g})", winner_name(v), names, key,
                                                       high ? "high" : "low", end));
            }
    }
    // The soak drift bound's ends, where a soak's drift lies between them (else no end changes a verdict).
    bool drift_in_band = false;
    for (const auto& runs : setup.soaks)
        for (const SoakRun& run : runs)
            drift_in_band |= run.drift_pct > kSoakDriftBound.lo && run.drift_pct <= kSoakDriftBound.hi;
    if (!drift_in_band) return flips;
    const std::vector<CompareRow>& rows = given;
    for (bool high : {false, true})
        for (size_t s = 0; s < central.size(); ++s) {
            if (std::find(rules[s].needs.begin(), rules[s].needs.end(), "soak") == rules[s].needs.end()) continue;
            ScenarioRule at_end = rules[s];
            at_end.soak_drift_bound_pct = high ? kSoakDriftBound.hi : kSoakDriftBound.lo;
            const Verdict v = decide(rows, at_end, terms);
            if (winner_name(v) != winner_name(central[s]))
                flips[s].push_back(fmt::format("{} with soak.drift_bound_pct at its {} end ({:g})", winner_name(v),
                                               high ? "high" : "low", at_end.soak_drift_bound_pct));
        }
    return flips;
}

namespace {

// The value at `key` of a JSON object (null when missing, or when `j` is no object).
nlohmann::json field(const nlohmann::json& j, const char* key) {
    return j.is_object() && j.contains(key) ? j[key] : nlohmann::json();
}

// A measured figure a card can stand beside its projection: a positive finite number.
bool measured(const nlohmann::json& r, const char* key) {
    const double v = number_of(r, key);
    return std::isfinite(v) && v > 0;
}

}  // namespace

std::vector<CardFigure> card_tests(const HardwareProfile& hw, const Calibration& cal, const std::string& configs_dir,
                                   const std::string& results_dir) {
    const CostModel model(hw, cal);
    std::vector<CardFigure> out;
    for (const auto& [precision, size] : {std::pair{Precision::fp16, 8192}, std::pair{Precision::fp32, 4096}}) {
        TracedOp op;  // as TraceOps records the row-major C = A @ B the gemm subcommand times
        op.kind = "gemm";
        op.dtype = compute_dtype(precision);
        op.tensor_core = true;
        op.m = op.n = op.k = size;
        op.flops = 2.0 * size * size * size;
        op.bytes = 3.0 * size * size * dtype_size(op.dtype);
        const double ms = model.op_ms(op, precision);
        const auto [record, file] = latest_record(results_dir, [&](const nlohmann::json& r) {
            return text_of(r, "subcommand") == "gemm" && text_of(r, "dtype") == precision_name(precision) &&
                   count_of(r, "m") == size && count_of(r, "n") == size && count_of(r, "k") == size &&
                   gpu_name_of(r) == hw.device_name && measured(field(r, "time_ms"), "median") && measured(r, "tflops");
        });
        const std::string name = fmt::format("GEMM {} {}^3", precision_name(precision), size);
        out.push_back({name, "ms", ms, record.is_null() ? -1.0 : number_of(record["time_ms"], "median"), file});
        out.push_back({name, "TFLOP/s", op.flops / (ms / 1e3) / 1e12, record.is_null() ? -1.0 : number_of(record, "tflops"),
                       file});
    }
    for (const auto& [preset, label] : {std::pair{"resnet50.yaml", "ResNet-50"}, std::pair{"bert-base.yaml", "BERT-base"}}) {
        const TrainConfig cfg = load_config_file(configs_dir + "/" + preset);
        const Projection p = project_workload(cfg, model, {1}, {1}).front();
        // A ResNet record counts only where it ran the engine the projection traced.
        const std::string engine =
            cfg.model == "resnet" ? conv_engine_name(resolve_conv_engine(cfg, TraceOps(cfg.precision))) : "";
        const auto [record, file] = latest_record(results_dir, [&](const nlohmann::json& r) {
            if (text_of(r, "subcommand") != "train" || count_of(r, "world_size") != 1 || gpu_name_of(r) != hw.device_name ||
                count_of(r, "local_batch") != cfg.batch_size || text_of(r, "precision") != precision_name(cfg.precision) ||
                !measured(r, "samples_per_s"))
                return false;
            const nlohmann::json c = field(r, "config");
            if (text_of(c, "model") != cfg.model) return false;
            const nlohmann::json want = to_json(cfg);
            if (cfg.model == "resnet") return field(c, "resnet") == want["resnet"] && conv_engine_of_record(r) == engine;
            const nlohmann::json t = field(c, "transformer");
            for (const char* key : {"arch", "layers", "hidden", "seq_len"})
                if (field(t, key) != want["transformer"][key]) return false;
            return true;
        });
        out.push_back({fmt::format("{} batch {}", label, cfg.batch_size), "samples/s", p.samples_per_s,
                       record.is_null() ? -1.0 : number_of(record, "samples_per_s"), file});
    }
    return out;
}

Scenario load_scenario(const std::string& path, const std::string& configs_dir) {
    const YAML::Node root = load_yaml_document(read_text_file(path, "scenario"), path, "scenario");
    YamlFields f(path);
    if (!root.IsMap()) f.fail_at(root.Mark(), "the scenario must be a map of keys");
    Scenario sc;
    sc.source = path;
    sc.name = std::filesystem::path(path).stem().string();
    std::set<std::string> seen;
    f.for_each_key(root, "", {"scenario", "gpus", "workloads", "requires", "input", "sharding"},
                   [&](const std::string& key, const YAML::Node& k, const YAML::Node& v) {
                       seen.insert(key);
                       if (key == "scenario") {
                           sc.rule.scenario = f.non_empty_text(v, k, key);
                       } else if (key == "gpus") {
                           sc.rule.gpus = static_cast<int>(f.integer(v, k, key, 1, 64));
                       } else if (key == "input") {
                           sc.real_input = f.choice(v, k, key, {"synthetic", "real"}) == "real";
                       } else if (key == "sharding") {
                           if (!v.IsSequence() || v.size() == 0)
                               f.fail(v, k, key, "a list of sharding modes, tried in order: none, optimizer, gradients, parameters");
                           std::vector<std::string> names;
                           for (const YAML::Node& item : v) {
                               names.push_back(f.choice(item, k, key, names_of(sharding_choices())));
                               sc.sharding.push_back(parse_sharding_mode(names.back()));
                           }
                           if (const std::string repeated = repeated_entry(names); !repeated.empty()) f.fail(v, k, key, repeated);
                       } else if (key == "workloads") {
                           if (!v.IsSequence() || v.size() == 0)
                               f.fail(v, k, key, "a list of workload configs (paths under configs/)");
                           for (const YAML::Node& item : v) {
                               const std::string w = configs_dir + "/" + f.non_empty_text(item, k, key);
                               if (!std::filesystem::is_regular_file(w))
                                   f.fail_at(item.Mark(), fmt::format("key 'workloads': no workload config {}", w));
                               sc.workloads.push_back(w);
                           }
                           if (const std::string repeated = repeated_file(sc.workloads); !repeated.empty())
                               f.fail(v, k, key, repeated);
                       } else {
                           if (!v.IsSequence()) f.fail(v, k, key, "a list of: ecc, datacenter_use, vendor_driver, soak");
                           for (const YAML::Node& item : v)
                               sc.rule.needs.push_back(
                                   f.choice(item, k, key, {"ecc", "datacenter_use", "vendor_driver", "soak"}));
                       }
                   });
    for (const char* key : {"scenario", "gpus", "workloads"})
        if (!seen.count(key)) f.fail_at(root.Mark(), fmt::format("key '{}': missing", key));
    return sc;
}

}  // namespace sb

namespace sb {

namespace {

// "bert-large-s384 b32": the workload's file name and its per-GPU batch (unless the name says it).
std::string workload_label(const std::string& path, const TrainConfig& cfg) {
    const std::string stem = std::filesystem::path(path).stem().string();
    const std::string batch = fmt::format("b{}", cfg.batch_size);
    return stem.find(batch) != std::string::npos ? stem : stem + " " + batch;
}

}  // namespace

std::vector<Scenario> resolve_scenarios(const std::vector<std::string>& names, const std::string& configs_dir) {
    const std::vector<std::string> known = shipped_scenario_names();
    const std::vector<std::string>& asked = names.empty() ? known : names;
    if (asked.empty()) throw UserError("compare: no scenario presets found in configs/scenarios (give --config)");
    std::vector<std::string> paths;
    for (const std::string& name : asked) {
        const bool is_path = name.find('/') != std::string::npos || name.find(".yaml") != std::string::npos;
        if (!is_path && std::find(known.begin(), known.end(), name) == known.end())
            throw UserError(fmt::format("--scenario {}: no such scenario; scenarios: {}", printable(name),
                                        fmt::join(known, ", ")));
        paths.push_back(is_path ? name : configs_dir + "/scenarios/" + name + ".yaml");
    }
    // A preset named twice, by its name and by its path, would judge (and print) every row twice.
    if (const std::string repeated = repeated_file(paths); !repeated.empty()) throw UserError("--scenario: " + repeated);
    std::vector<Scenario> scenarios;
    for (const std::string& path : paths) scenarios.push_back(load_scenario(path, configs_dir));
    return scenarios;
}

WorkloadComparison compare_workload(const TrainConfig& cfg, const std::vector<HardwareProfile>& profiles,
                                    const std::vector<Calibration>& calibrations, const CostTerms& terms,
                                    const CompareSetup& setup) {
    WorkloadComparison c{cfg, setup.nodes, compare_rows(cfg, profiles, calibrations, "", false, setup), {}, {}};
    c.verdicts = verdicts(c.rows);
    c.flips = verdict_flips(cfg, profiles, calibrations, c.verdicts, single_workload_rules(), terms, setup);
    return c;
}

const char* budget_name(Score s) { return s == Score::samples_per_s ? "ample" : "limited"; }

const JudgedWorkload& ScenarioGuide::workload(const Scenario& scenario, const std::string& path) const {
    const bool real = scenario.real_input || setup.real_input;
    for (const JudgedWorkload& w : workloads)
        if (w.path == path && w.real_input == real && w.sharding == scenario.sharding) return w;
    throw std::logic_error("compare: a scenario's workload was not judged");
}

std::pair<const Verdict*, const std::vector<std::string>*> ScenarioGuide::cell(const Scenario& scenario,
                                                                               const std::string& path, Score score) const {
    const JudgedWorkload& w = workload(scenario, path);
    for (size_t i = 0; i < w.rules.size(); ++i)
        if (w.rules[i].scenario == scenario.rule.scenario && w.rules[i].score == score) return {&w.verdicts[i], &w.flips[i]};
    throw std::logic_error("compare: a scenario's rule was not decided");
}

ScenarioGuide judge_scenarios(const std::vector<HardwareProfile>& profiles, const std::vector<Calibration>& calibrations,
                              const std::vector<Scenario>& scenarios, const CostTerms& terms, CompareSetup setup,
                              const std::string& configs_dir, const std::string& results_dir,
                              const std::function<TrainConfig(const std::string&)>& load_workload) {
    ScenarioGuide guide{profiles, scenarios, terms, {}, results_dir, {}, {}};
    for (const HardwareProfile& hw : profiles) setup.soaks.push_back(soak_runs(hw, results_dir));
    guide.setup = std::move(setup);
    // Every workload once, with every rule that judges it.
    for (const Scenario& sc : scenarios)
        for (const std::string& path : sc.workloads) {
            const bool real = sc.real_input || guide.setup.real_input;
            auto it = std::find_if(guide.workloads.begin(), guide.workloads.end(), [&](const JudgedWorkload& w) {
                return w.path == path && w.real_input == real && w.sharding == sc.sharding;
            });
            if (it == guide.workloads.end()) {
                JudgedWorkload w;
                w.path = path;
                w.real_input = real;
                w.sharding = sc.sharding;
                w.cfg = load_workload(path);
                w.label = workload_label(path, w.cfg) + (real ? ", real input" : "");
                guide.workloads.push_back(std::move(w));
                it = guide.workloads.end() - 1;
            }
            for (Score score : kBudgets) {
                ScenarioRule rule = sc.rule;
                rule.score = score;
                it->rules.push_back(rule);
            }
        }
    // One workload judged both with and without a scenario's choice among sharding modes: two names.
    for (JudgedWorkload& w : guide.workloads)
        if (!w.sharding.empty() && std::count_if(guide.workloads.begin(), guide.workloads.end(), [&](const JudgedWorkload& o) {
                return o.label == w.label;
            }) > 1)
            w.label += ", mode as fits";
    for (JudgedWorkload& w : guide.workloads) {
        CompareSetup fed = guide.setup;
        fed.real_input = w.real_input;
        fed.sharding = w.sharding;
        w.rows = compare_rows(w.cfg, profiles, calibrations, "", false, fed);
        for (const ScenarioRule& rule : w.rules) w.verdicts.push_back(decide(w.rows, rule, terms));
        w.flips = verdict_flips(w.cfg, profiles, calibrations, w.verdicts, w.rules, terms, fed);
    }
    for (size_t i = 0; i < profiles.size(); ++i)
        guide.cards.push_back(card_tests(profiles[i], calibrations[i], configs_dir, results_dir));
    return guide;
}

}  // namespace sb
