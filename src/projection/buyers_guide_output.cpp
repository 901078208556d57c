// The buyer's guide as `compare` prints it (src/projection/buyers_guide_output.h).
#include "src/projection/buyers_guide_output.h"

#include <algorithm>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "src/core/files.h"
#include "src/core/workload.h"

namespace sb {

namespace {

// Text wrapped at `width` columns: its own leading spaces kept, continuation lines indented by `indent`.
// Every character of it printable (src/core/files.h): a name from a profile or preset cannot
// break the terminal's table with a newline or send it an escape sequence.
std::string wrapped(const std::string& raw, size_t indent, size_t width = 100) {
    const std::string text = printable(raw);
    const size_t lead = std::min(text.find_first_not_of(' '), text.size());
    std::string out, line = text.substr(0, lead);
    bool first = true;
    std::stringstream words(text.substr(lead));
    for (std::string w; words >> w; first = false) {
        if (!first && line.size() + 1 + w.size() > width) {
            out += line + "\n";
            line = std::string(indent, ' ') + w;
        } else {
            line += (first ? "" : " ") + w;
        }
    }
    return out + line;
}

// compare --json: a row's configurations (by_gpus, or on_nodes), each with its band and scores;
// with `terms`, also per $10k of the whole cost.
nlohmann::json configurations_json(const CompareRow& row, const std::vector<Projection>& projections,
                                   const CostTerms* terms) {
    nlohmann::json out = nlohmann::json::array();
    for (const Projection& p : projections) {
        const bool sharded = p.sharding != ShardingMode::none;
        nlohmann::json j = {{"gpus", p.step.world_size},
                            {"samples_per_s", p.samples_per_s},
                            {"samples_per_s_band", {p.bands.samples_per_s.lo, p.bands.samples_per_s.hi}},
                            {"scaling_efficiency", p.efficiency},
                            {"speedup", p.speedup},
                            {sharded ? "sharding_busbw_gbps" : "allreduce_busbw_gbps", p.busbw},
                            {"exposed_comm_ms", p.step.exposed_comm_ms},
                            {"bands", to_json(p.bands, p.sharding)},
                            {"samples_per_s_per_10k_usd", row.per_10k(p)},
                            {"sharding", sharding_mode_name(p.sharding)},
                            {"memory_per_gpu_gib", p.record["memory_per_gpu_gb"]},
                            {"fits_memory", p.fits_memory()}};
        // What the step's collectives take, every bucket back to back.
        if (sharded) j.update({{"reduce_scatter_ms", p.step.reduce_scatter_ms}, {"all_gather_ms", p.step.all_gather_ms}});
        else j["allreduce_ms"] = p.step.allreduce_ms;
        if (p.record.contains("sharding_fit")) j["sharding_fit"] = p.record["sharding_fit"];
        if (terms)
            j["samples_per_s_per_10k_usd_whole_cost"] =
                p.samples_per_s * 1e4 / configuration_cost(row.hw, p.step.world_size, *terms).total();
        j["samples_per_s_per_kw"] = row.per_kw(p);
        if (p.step.nodes > 1) j.update({{"nodes", p.step.nodes}, {"gpus_per_node", p.step.world_size / p.step.nodes}});
        out.push_back(std::move(j));
    }
    return out;
}

// The node count of a multi-GPU scenario's configuration, said after its GPUs: " per node on 2 nodes".
std::string on_nodes_text(int nodes) { return nodes > 1 ? fmt::format(" per node on {} nodes", nodes) : ""; }

// A row's configurations on N nodes, one line: "on 2 nodes: 2 GPUs 5371.0, ..., 16 GPUs 42000.0
// [41000.0-42000.0]; at 16 GPUs 97.7% scaling, 0.80 ms exposed communication".
std::string on_nodes_line(const CompareRow& row) {
    std::string cells;
    for (const Projection& p : row.on_nodes)
        cells += fmt::format("{}{} GPU{} {:.1f}", cells.empty() ? "" : ", ", p.step.world_size, p.step.world_size > 1 ? "s" : "",
                             p.samples_per_s);
    const Projection& top = row.on_nodes.back();
    const Band band = top.bands.samples_per_s;
    return fmt::format("on {} nodes: {} [{:.1f}-{:.1f}]; at {} GPUs {:.1f}% scaling, {:.2f} ms exposed communication",
                       row.nodes(), cells, band.lo, band.hi, top.step.world_size, 100.0 * top.efficiency,
                       top.step.exposed_comm_ms);
}

// Where a workload is sharded or chooses its mode, per configuration of one node: the mode it runs
// in, its footprint (every mode's where none fits) and what the step's collectives take: "sharding,
// the first of none, optimizer, gradients, parameters that fits (GiB per GPU; the collectives per
// step): 1 GPU parameters 31.76 NO (none 32.83, optimizer 38.63, gradients 33.75, parameters 31.76
// GiB per GPU of 24) (reduce-scatter 14.6 + all-gather 1.3 ms), ..., 4 GPUs gradients 20.69
// (reduce-scatter 819.8 + all-gather 819.8 ms), ...".
std::string sharding_line(const CompareRow& row) {
    const bool chosen = !row.at_max().fits.empty();
    if (!chosen && std::all_of(row.by_gpus.begin(), row.by_gpus.end(),
                               [](const Projection& p) { return p.sharding == ShardingMode::none; }))
        return "";
    std::string modes;
    for (const ModeFit& f : row.at_max().fits) modes += fmt::format("{}{}", modes.empty() ? "" : ", ", sharding_mode_name(f.mode));
    std::string cells;
    for (const Projection& p : row.by_gpus) {
        const std::string cost = p.sharding == ShardingMode::none
                                     ? fmt::format("all-reduce {:.1f} ms", p.step.allreduce_ms)
                                     : fmt::format("reduce-scatter {:.1f} + all-gather {:.1f} ms", p.step.reduce_scatter_ms,
                                                   p.step.all_gather_ms);
        cells += fmt::format("{}{} {} {:.2f}{} ({})", cells.empty() ? "" : ", ", configuration_name(p),
                             sharding_mode_name(p.sharding), p.record["memory_per_gpu_gb"].get<double>(),
                             p.fits_memory() ? "" : fmt::format(" NO ({})", footprints(p, row.hw)), cost);
    }
    return fmt::format("sharding{} (GiB per GPU; the collectives per step): {}",
                       chosen ? ", the first of " + modes + " that fits" : "", cells);
}

}  // namespace

nlohmann::json to_json(const ScenarioGuide& guide) {
    nlohmann::json out = {{"projected", true},
                          {"nodes", guide.setup.nodes},
                          {"cost_terms", {{"years", guide.terms.years}, {"usd_per_kwh", guide.terms.usd_per_kwh}}},
                          {"tie_within", kTieWithin},
                          {"profiles", nlohmann::json::array()},
                          {"workloads", nlohmann::json::array()},
                          {"scenarios", nlohmann::json::array()}};
    for (const HardwareProfile& hw : guide.profiles) {
        const int g = static_cast<int>(hw.gpus_per_node.value);
        const ConfigurationCost c = configuration_cost(hw, g, guide.terms);
        out["profiles"].push_back({{"name", hw.name},
                                   {"node_cost_usd", {{"gpus", c.gpus_usd}, {"server", c.server_usd}, {"power", c.power_usd},
                                                      {"total", c.total()}, {"gpus_per_node", g}}},
                                   {"hardware", to_json(hw)}});
    }
    for (size_t i = 0; i < guide.profiles.size(); ++i) {
        nlohmann::json figures = nlohmann::json::array();
        for (const CardFigure& f : guide.cards[i]) {
            nlohmann::json j = {{"test", f.test}, {"unit", f.unit}, {"projected", f.projected}};
            if (f.measured >= 0) j.update({{"measured", f.measured}, {"measured_from", f.measured_from}});
            figures.push_back(j);
        }
        const HardwareProfile& hw = guide.profiles[i];
        if (const std::string soak = soak_summary(guide.profiles[i], guide.results_dir); !soak.empty()) out["profiles"][i]["soak"] = soak;
        const SoakVerdict soak = soak_verdict(guide.setup.soaks[i]);
        out["profiles"][i]["soak_verdict"] = {{"status", soak_status_name(soak.status)},
                                              {"said", soak.said},
                                              {"runs", guide.setup.soaks[i].size()},
                                              {"drift_bound_pct", {kSoakDriftBound.value, kSoakDriftBound.lo, kSoakDriftBound.hi}}};
        out["profiles"][i]["card"] = {{"figures", figures},
                                      {"memory_gib", hw.memory_gb.value},
                                      {"memory_bandwidth_gbps", hw.peak.mem_bw_gbps},
                                      {"copy_gbps", hw.copy_gbps.value},
                                      {"tdp_w", hw.tdp_w.value},
                                      {"price_usd", hw.price_usd.value}};
    }
    for (const JudgedWorkload& r : guide.workloads) {
        nlohmann::json rows = nlohmann::json::array();
        for (const CompareRow& row : r.rows) {
            rows.push_back({{"name", row.hw.name},
                            {"memory_per_gpu_gib", row.at_max().record["memory_per_gpu_gb"]},
                            {"memory_breakdown_gib", row.at_max().record["memory_breakdown_gb"]},
                            {"memory_headroom_gib", row.hw.memory_gb.value - row.at_max().record["memory_per_gpu_gb"].get<double>()},
                            {"fits_memory", row.at_max().fits_memory()},
                            {"ranges", ranged_keys(row.hw)},
                            {"by_gpus", configurations_json(row, row.by_gpus, &guide.terms)}});
            if (!row.on_nodes.empty())
                rows.back()["on_nodes"] = configurations_json(row, row.on_nodes, &guide.terms);
        }
        out["workloads"].push_back({{"workload", r.label}, {"config", to_json(r.cfg)}, {"profiles", rows}});
    }
    for (const Scenario& sc : guide.scenarios) {
        nlohmann::json cells = nlohmann::json::array();
        for (const std::string& w : sc.workloads)
            for (Score score : kBudgets) {
                const auto [v, flips] = guide.cell(sc, w, score);
                cells.push_back({{"workload", guide.workload(sc, w).label},
                                 {"budget", budget_name(score)},
                                 {"winner", v->winner ? nlohmann::json(v->winner->hw.name) : nlohmann::json()},
                                 {"reason", v->reason},
                                 {"flips", *flips}});
            }
        out["scenarios"].push_back({{"scenario", sc.rule.scenario}, {"preset", sc.source}, {"gpus", sc.rule.gpus},
                                    {"nodes", sc.rule.gpus > 1 ? guide.setup.nodes : 1}, {"requires", sc.rule.needs},
                                    {"cells", cells}});
    }
    return out;
}

void print_scenario_guide(const ScenarioGuide& guide) {
    std::string list;
    for (const HardwareProfile& hw : guide.profiles) list += (list.empty() ? "" : ", ") + hw.name;
    fmt::print("{}\n", wrapped("scalebench compare: the buyer's table for " + list +
                                    " (projected, not measured). ample: the most samples/s per node; limited: the "
                                    "most samples/s per $10k of the whole cost (GPUs, their share of the server, power "
                                    "over the period). * : a range of a profile flips the cell (below)." +
                                    (guide.setup.nodes > 1 ? fmt::format(" --nodes {}: every multi-GPU scenario judges {} nodes "
                                                                   "of each profile's node, the network between them the "
                                                                   "profile's.", guide.setup.nodes, guide.setup.nodes)
                                                     : std::string()),
                                0));
    fmt::print("\n{:<19} {:<19} {:<29} {}\n", "scenario", "workload", "ample budget", "limited budget");
    for (const Scenario& sc : guide.scenarios) {
        bool first = true;
        for (const std::string& w : sc.workloads) {
            std::string cols[2];
            int c = 0;
            for (Score score : kBudgets) {
                const auto [v, flips] = guide.cell(sc, w, score);
                cols[c++] = (v->winner ? printable(v->winner->hw.name) : std::string("none qualifies")) + (flips->empty() ? "" : " *");
            }
            fmt::print("{:<19} {:<19} {:<29} {}\n", first ? printable(sc.rule.scenario) : "", printable(guide.workload(sc, w).label),
                       cols[0], cols[1]);
            first = false;
        }
    }

    fmt::print("\nnode cost per profile, full node (power: GPUs' TDP and host, {:g} years at {:g} USD/kWh):\n",
               guide.terms.years, guide.terms.usd_per_kwh);
    fmt::print("{:<24} {:>11} {:>11} {:>11} {:>11} {:>8}\n", "profile", "GPUs USD", "server USD", "power USD", "total USD",
               "node kW");
    for (const HardwareProfile& hw : guide.profiles) {
        const int g = static_cast<int>(hw.gpus_per_node.value);
        const ConfigurationCost c = configuration_cost(hw, g, guide.terms);
        fmt::print("{:<24} {:>11.0f} {:>11} {:>11.0f} {:>11.0f} {:>8.2f}\n", printable(hw.name), c.gpus_usd,
                   hw.server_usd.source.empty() ? std::string("not given") : fmt::format("{:.0f}", c.server_usd),
                   c.power_usd, c.total(), (g * hw.tdp_w.value + hw.host_power_w.value) / 1e3);
    }

    fmt::print("\ncard tests, one GPU: projected, and measured (m) where results/ has the GPU's records\n");
    fmt::print("{:<22} {:>14} {:>13} {:>9} {:>9} {:>5} {:>6} {:>5} {:>6}\n", "profile", "fp16 8192^3", "fp32 4096^3",
               "RN50 b256", "BERT-b 32", "GiB", "GB/s", "TDP W", "USD");
    fmt::print("{:<22} {:>14} {:>13} {:>9} {}\n", "", "ms TFLOP/s", "ms TFLOP/s", "samples/s", "samples/s");
    std::vector<std::string> measured_files;
    for (size_t i = 0; i < guide.profiles.size(); ++i) {
        const std::vector<CardFigure>& c = guide.cards[i];
        const HardwareProfile& hw = guide.profiles[i];
        auto cells = [&](bool measured) {
            std::string out;
            const int widths[] = {6, 7, 5, 7, 9, 9};
            for (size_t k = 0; k < c.size(); ++k) {
                const double v = measured ? c[k].measured : c[k].projected;
                out += fmt::format(" {:>{}}", v < 0 ? std::string("-") : fmt::format("{:.{}f}", v, c[k].unit == "ms" ? 2 : 1),
                                   widths[k]);
            }
            return out;
        };
        fmt::print("{:<22}{} {:>5.0f} {:>6.0f} {:>5.0f} {:>6.0f}\n", printable(hw.name), cells(false), hw.memory_gb.value,
                   hw.peak.mem_bw_gbps, hw.tdp_w.value, hw.price_usd.value);
        if (std::any_of(c.begin(), c.end(), [](const CardFigure& f) { return f.measured >= 0; })) {
            fmt::print("{:<22}{}\n", "  (m)", cells(true));
            for (const CardFigure& f : c)
                if (f.measured >= 0 && std::find(measured_files.begin(), measured_files.end(), f.measured_from) == measured_files.end())
                    measured_files.push_back(f.measured_from);
        }
    }
    fmt::print("{}\n", wrapped("GiB: the GPU's memory; GB/s: its datasheet memory bandwidth; measured from: " +
                                    (measured_files.empty() ? std::string("none") : fmt::format("{}", fmt::join(measured_files, ", "))),
                                2));

    for (const JudgedWorkload& r : guide.workloads) {
        fmt::print("\n{}\n", wrapped(fmt::format("{} ({} parameters, {}{}): samples/s [band] by GPUs; the rest at the "
                                                "most GPUs",
                                                r.label, r.rows.front().at_max().record["num_params"].get<size_t>(),
                                                precision_name(r.cfg.precision), traced_engine(r.cfg)),
                                    2));
        fmt::print("{:<22} {:>9} {:>9} {:>9} {:>9} {:>6} {:>8} {:>9} {:>7}\n", "profile", "1 GPU", "2 GPUs", "4 GPUs",
                   "8 GPUs", "eff.", "exp.ms", "mem GiB", "fits");
        for (const CompareRow& row : r.rows) {
            auto at = [&](int g) {
                const Projection* p = row.at(g);
                return p ? fmt::format("{:.1f}", p->samples_per_s) : std::string("-");
            };
            const Projection& top = row.at_max();
            fmt::print("{:<22} {:>9} {:>9} {:>9} {:>9} {:>5.1f}% {:>8.2f} {:>9.2f} {:>7}\n", printable(row.hw.name), at(1), at(2),
                       at(4), at(8), 100.0 * top.efficiency, top.step.exposed_comm_ms,
                       top.record["memory_per_gpu_gb"].get<double>(), top.fits_memory() ? "yes" : "NO");
            if (const std::string modes = sharding_line(row); !modes.empty()) fmt::print("{}\n", wrapped("  " + modes, 4));
            if (const Band& band = top.bands.samples_per_s; band.hi > band.lo)
                fmt::print("{}\n", wrapped(fmt::format("  band at {} GPUs: [{:.1f}-{:.1f}], efficiency [{:.1f}-{:.1f}]%, "
                                                     "exposed communication [{:.2f}-{:.2f}] ms, from {}",
                                                     top.step.world_size, band.lo, band.hi, 100 * top.bands.efficiency.lo,
                                                     100 * top.bands.efficiency.hi, top.bands.exposed_comm_ms.lo,
                                                     top.bands.exposed_comm_ms.hi, range_list(row.hw)),
                                         4));
            if (!row.on_nodes.empty()) fmt::print("{}\n", wrapped("  " + on_nodes_line(row), 4));
        }
    }

    fmt::print("\nthe figures behind each cell:\n");
    for (const Scenario& sc : guide.scenarios) {
        fmt::print("{}\n", wrapped(fmt::format("{} ({} GPU{}{}; {})", sc.rule.scenario, sc.rule.gpus,
                                              sc.rule.gpus > 1 ? "s" + on_nodes_text(guide.setup.nodes) + " or the node's largest below"
                                                               : std::string(),
                                              sc.rule.needs.empty() ? "" : ", requires " + fmt::format("{}", fmt::join(sc.rule.needs, ", ")),
                                              sc.source),
                                  2));
        if (std::find(sc.rule.needs.begin(), sc.rule.needs.end(), "soak") != sc.rule.needs.end())
            for (size_t i = 0; i < guide.profiles.size(); ++i) {  // the soaks the cells judge, and the latest one's telemetry
                const std::string latest = soak_summary(guide.profiles[i], guide.results_dir);
                fmt::print("{}\n", wrapped("  " + guide.profiles[i].name + ": soak " + soak_verdict(guide.setup.soaks[i]).said +
                                               (latest.empty() ? "" : "; the latest: " + latest),
                                           4));
            }
        for (const std::string& w : sc.workloads)
            for (Score score : kBudgets) {
                const auto [v, flips] = guide.cell(sc, w, score);
                const std::string head = fmt::format("  {}, {}: ", guide.workload(sc, w).label, budget_name(score));
                fmt::print("{}\n", wrapped(head + (v->winner ? v->winner->hw.name + ": " : std::string("none: ")) + v->reason, 4));
                for (const std::string& f : *flips) fmt::print("{}\n", wrapped("    flips inside the band: " + f, 6));
            }
    }
}

nlohmann::json to_json(const WorkloadComparison& c) {
    nlohmann::json out = {{"workload", to_json(c.cfg)}, {"projected", true}, {"nodes", c.nodes},
                          {"profiles", nlohmann::json::array()}, {"verdicts", nlohmann::json::array()}};
    for (const CompareRow& r : c.rows) {
        out["profiles"].push_back({{"name", r.hw.name},
                                   {"memory_per_gpu_gib", r.at_max().record["memory_per_gpu_gb"]},
                                   {"memory_breakdown_gib", r.at_max().record["memory_breakdown_gb"]},
                                   {"fits_memory", r.at_max().fits_memory()},
                                   {"ranges", ranged_keys(r.hw)},
                                   {"by_gpus", configurations_json(r, r.by_gpus, nullptr)},
                                   {"hardware", to_json(r.hw)}});
        if (!r.on_nodes.empty())
            out["profiles"].back()["on_nodes"] = configurations_json(r, r.on_nodes, nullptr);
    }
    for (size_t i = 0; i < c.verdicts.size(); ++i)
        out["verdicts"].push_back({{"scenario", c.verdicts[i].scenario},
                                   {"winner", c.verdicts[i].winner ? nlohmann::json(c.verdicts[i].winner->hw.name) : nlohmann::json()},
                                   {"reason", c.verdicts[i].reason},
                                   {"flips", c.flips[i]}});
    return out;
}

void print_workload_comparison(const WorkloadComparison& c) {
    const auto& any = c.rows.front().at_max().record;
    fmt::print("compare: {} model, {} parameters, precision {}, {} scaling, batch {} {}{}\n(projected, not measured)\n",
               c.cfg.model, any["num_params"].get<size_t>(), precision_name(c.cfg.precision),
               scaling_mode_name(c.cfg.scaling_mode), c.cfg.batch_size,
               c.cfg.scaling_mode == ScalingMode::weak ? "per GPU" : "global", traced_engine(c.cfg));
    // Two tables within 100 columns: samples/s by GPUs (one node, then the full node on N nodes),
    // then the figures at each profile's most GPUs.
    const std::string nodes_column = c.nodes > 1 ? fmt::format(" {:>10}", fmt::format("{} nodes", c.nodes)) : "";
    fmt::print("{:<24} {:>10} {:>10} {:>10} {:>10}{} {:>7}\n", "samples/s", "1 GPU", "2 GPUs", "4 GPUs", "8 GPUs",
               nodes_column, "eff.");
    for (const auto& r : c.rows) {
        auto cell = [&](int g) {
            const Projection* p = r.at(g);
            return p ? fmt::format("{:.1f}", p->samples_per_s) : std::string("-");
        };
        fmt::print("{:<24} {:>10} {:>10} {:>10} {:>10}{} {:>6.1f}%\n", printable(r.hw.name), cell(1), cell(2), cell(4), cell(8),
                   r.on_nodes.empty() ? "" : fmt::format(" {:>10.1f}", r.top().samples_per_s), 100.0 * r.top().efficiency);
    }
    fmt::print("\n{:<24} {:>5} {:>10} {:>10} {:>10} {:>10} {:>6}\n", "at the most GPUs", "GPUs", "exp.comm ms",
               "per $10k", "per kW", "mem GiB", "fits");
    for (const auto& r : c.rows) {
        const Projection& top = r.top();
        fmt::print("{:<24} {:>5} {:>11.3f} {:>10.1f} {:>10.1f} {:>10.2f} {:>6}\n", printable(r.hw.name), top.step.world_size,
                   top.step.exposed_comm_ms, r.per_10k(top), r.per_kw(top), top.record["memory_per_gpu_gb"].get<double>(),
                   top.fits_memory() ? "yes" : "NO");
    }
    for (const auto& r : c.rows)
        if (const std::string modes = sharding_line(r); !modes.empty()) fmt::print("{}\n", wrapped(r.hw.name + " " + modes, 2));
    fmt::print("{}\n", wrapped((c.nodes > 1 ? fmt::format("{} nodes: the full node on {} nodes (the network between "
                                                                  "them the profile's); ",
                                                                  c.nodes, c.nodes)
                                                    : std::string()) +
                                      "eff.: scaling efficiency at the most GPUs; per $10k: samples/s per 10,000 USD of "
                                      "GPUs (the profiles' reference prices, GPUs only); per kW: per kW of node power (GPU TDP "
                                      "and the GPUs' share of the host's); mem "
                                      "GiB: per GPU",
                                  2));
    // The band each profile's ranges give its figures, at each GPU count and on N nodes.
    bool any_range = false;
    for (size_t i = 0; i < c.rows.size(); ++i) {
        if (ranged_keys(c.rows[i].hw).empty()) continue;
        if (!any_range) fmt::print("\nbands (every ranged number of the profile at its ends):\n");
        any_range = true;
        std::string cells;
        for (const std::vector<Projection>* projections : {&c.rows[i].by_gpus, &c.rows[i].on_nodes})
            for (const Projection& p : *projections)
                cells += fmt::format("{}{}: {:.1f} [{:.1f}-{:.1f}] ({:.1f}% [{:.1f}-{:.1f}])", cells.empty() ? "" : ", ",
                                     configuration_name(p), p.samples_per_s, p.bands.samples_per_s.lo,
                                     p.bands.samples_per_s.hi, 100 * p.efficiency, 100 * p.bands.efficiency.lo,
                                     100 * p.bands.efficiency.hi);
        fmt::print("{}\n    from:\n", wrapped("  " + c.rows[i].hw.name + " " + cells, 4));
        std::stringstream ranges(range_list(c.rows[i].hw));
        for (std::string range; std::getline(ranges, range, ',');)
            fmt::print("      {}\n", printable(range.substr(range.find_first_not_of(' '))));
    }

    fmt::print("\nverdicts for this workload:\n");
    for (size_t s = 0; s < c.verdicts.size(); ++s) {
        const Verdict& v = c.verdicts[s];
        const std::string said = v.winner ? v.winner->hw.name + ": " + v.reason : "none of the profiles: " + v.reason;
        fmt::print("{}\n", wrapped("  " + v.scenario + ": " + said, 4));
        for (const std::string& f : c.flips[s]) fmt::print("{}\n", wrapped("    flips inside the band: " + f, 6));
    }
}

}  // namespace sb
