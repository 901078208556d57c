// Terminal, JSON and Markdown forms of the doctor's checks.
#include "src/doctor/output.h"

#include <fmt/format.h>

namespace sb::doctor {

namespace {

std::string summary_line(const std::vector<Check>& checks) {
    std::string line;
    for (Tier t : kTiers)
        line += fmt::format("{}{} {}", line.empty() ? "" : ", ", tier_name(t), verdict_name(tier_verdict(checks, t)));
    return line;
}

std::string setting(const ExpectedBands& bands, const SystemSnapshot& s) {
    const std::string gpu = s.gpus.empty() ? "no GPU" : s.gpus.front().name;
    return fmt::format("{} rank{}{}; bands from {} ({}; link {})", s.world_size, s.world_size == 1 ? "" : "s",
                       s.shared_gpu ? " sharing GPUs (collective and training figures are not hardware figures)" : "",
                       bands.profile.empty() ? "no profile: " + bands.why_none : "profile " + bands.profile, gpu,
                       bands.link.empty() ? "not detected" : bands.link);
}

// Markdown table cells: no pipes or line breaks inside.
std::string cell(std::string text) {
    for (char& ch : text)
        if (ch == '|' || ch == '\n') ch = ch == '|' ? '/' : ' ';
    return text;
}

}  // namespace

std::string format_table(const std::vector<Check>& checks, const ExpectedBands& bands, const SystemSnapshot& s) {
    std::string out = fmt::format("# scalebench doctor: {}\n", setting(bands, s));
    out += fmt::format("{:<14} {:<8} {}\n", "tier", "verdict", "check");
    for (const Check& c : checks) {
        out += fmt::format("{:<14} {:<8} {}\n", tier_name(c.tier), verdict_name(c.verdict), c.name);
        if (!c.figures.empty()) out += fmt::format("{:24}figures: {}\n", "", c.figures);
        if (!c.band.empty()) out += fmt::format("{:24}band:    {}\n", "", c.band);
        if (c.verdict == Verdict::skipped || c.verdict == Verdict::unjudged)
            out += fmt::format("{:24}reason:  {}\n", "", c.cause);
        if (c.verdict == Verdict::warn || c.verdict == Verdict::fail) {
            out += fmt::format("{:24}cause:   {}\n", "", c.cause);
            out += fmt::format("{:24}fix:     {}\n", "", c.fix);
        }
    }
    out += fmt::format("# {}; exit code {}\n", summary_line(checks), exit_code(checks));
    return out;
}

std::string format_markdown(const std::vector<Check>& checks, const ExpectedBands& bands, const SystemSnapshot& s) {
    std::string out = "# scalebench doctor\n\n";
    out += fmt::format("{}, taken {}.\n\n", setting(bands, s), s.taken);
    out += fmt::format("**{}** (exit code {})\n\n", summary_line(checks), exit_code(checks));
    out += "| tier | verdict | check | figures | band | cause or reason | fix |\n";
    out += "| --- | --- | --- | --- | --- | --- | --- |\n";
    for (const Check& c : checks)
        out += fmt::format("| {} | {} | {} | {} | {} | {} | {} |\n", tier_name(c.tier), verdict_name(c.verdict),
                           cell(c.name), cell(c.figures), cell(c.band), cell(c.cause), cell(c.fix));
    return out;
}

nlohmann::json checks_json(const std::vector<Check>& checks, const ExpectedBands& bands, const SystemSnapshot& s) {
    nlohmann::json j;
    for (Tier t : kTiers) j["tiers"][tier_name(t)] = verdict_name(tier_verdict(checks, t));
    j["checks"] = nlohmann::json::array();
    for (const Check& c : checks)
        j["checks"].push_back({{"tier", tier_name(c.tier)},
                               {"name", c.name},
                               {"verdict", verdict_name(c.verdict)},
                               {"figures", c.figures},
                               {"band", c.band},
                               {"cause", c.cause},
                               {"fix", c.fix}});
    j["bands"] = {{"profile", bands.profile},
                  {"why_none", bands.why_none},
                  {"link", bands.link},
                  {"gemm_tflops", {{"lo", bands.gemm.lo}, {"ceiling", bands.gemm.ceiling}, {"source", bands.gemm.source}}},
                  {"memory_copy_gbps",
                   {{"lo", bands.memory_copy.lo}, {"ceiling", bands.memory_copy.ceiling}, {"source", bands.memory_copy.source}}},
                  {"busbw_gbps", {{"lo", bands.busbw.lo}, {"ceiling", bands.busbw.ceiling}, {"source", bands.busbw.source}}},
                  {"peer_copy_gbps",
                   {{"lo", bands.peer_copy.lo}, {"ceiling", bands.peer_copy.ceiling}, {"source", bands.peer_copy.source}}}};
    j["exit_code"] = exit_code(checks);
    j["snapshot"] = s;
    return j;
}

}  // namespace sb::doctor
