// The collective sweep harness (see sweep.h): sizes, names, the timing and check of each
// measurement, the alpha-beta fit, and nccl-tests' text in both directions.
#include "collectives/sweep.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>

#include "collectives/host_dtype.h"
#include "base/errors.h"
#include "base/numbers.h"

namespace sb {

// ---------------------------------------------------------------- collectives and checks

size_t per_rank_count(size_t count, size_t element_size, int nranks) {
    const size_t group = std::max<size_t>(1, 16 / element_size);
    return count / static_cast<size_t>(nranks) / group * group;
}

double CheckContext::reduced(size_t i) const {
    double acc = input(0, i);
    for (int r = 1; r < nranks; ++r) {
        const double v = input(r, i);
        if (op == ReduceOp::max) acc = std::max(acc, v);
        else if (op == ReduceOp::min) acc = std::min(acc, v);
        else acc += v;
    }
    return op == ReduceOp::avg ? acc / nranks : acc;
}

namespace {

// The largest integer up to which every integer is exact in the dtype.
uint64_t exact_integer_limit(DType dtype) {
    switch (dtype) {
        case DType::f32: return uint64_t{1} << 24;
        case DType::f16: return uint64_t{1} << 11;
        case DType::bf16: return uint64_t{1} << 8;
        case DType::i32: break;  // not a sweep dtype (parse_comm_dtype)
    }
    return 1;
}

// Relative spacing of the dtype's values (2^-mantissa bits).
double dtype_epsilon(DType dtype) {
    switch (dtype) {
        case DType::f32: return std::ldexp(1.0, -23);
        case DType::f16: return std::ldexp(1.0, -10);
        case DType::bf16: return std::ldexp(1.0, -7);
        case DType::i32: break;  // not a sweep dtype
    }
    return 1;
}

uint64_t floor_power_of_two(uint64_t x) {
    uint64_t p = 1;
    while (p * 2 <= x) p *= 2;
    return p;
}

}  // namespace

CheckContext make_check_context(DType dtype, bool reduces, int rank, int nranks, int root, size_t count,
                                ReduceOp op, bool in_place, uint64_t seed) {
    CheckContext c;
    c.rank = rank;
    c.nranks = nranks;
    c.root = root;
    c.count = count;
    c.op = op;
    c.in_place = in_place;
    c.seed = seed;
    const uint64_t limit = exact_integer_limit(dtype);
    // Inputs lie in [1, span]; a sum over nranks stays within the exact range.
    const uint64_t span = reduces ? floor_power_of_two(std::max<uint64_t>(1, limit / static_cast<uint64_t>(nranks)))
                                  : limit;
    c.value_mask = span - 1;
    return c;
}

const std::vector<const Collective*>& all_collectives() {
    static const std::vector<const Collective*> list = {
        &all_reduce_collective(), &reduce_scatter_collective(), &all_gather_collective(), &broadcast_collective(),
        &reduce_collective(),     &alltoall_collective(),       &sendrecv_collective()};
    return list;
}

const Collective* find_collective(const std::string& name) {
    for (const Collective* c : all_collectives())
        if (name == c->name) return c;
    return nullptr;
}

// ---------------------------------------------------------------- sizes and names

std::vector<size_t> sweep_sizes(size_t min_bytes, size_t max_bytes, size_t step_bytes, int step_factor) {
    if (min_bytes > max_bytes)
        throw UserError(
            fmt::format("-b {} bytes is larger than -e {} bytes: the sweep has no sizes", min_bytes, max_bytes));
    std::vector<size_t> sizes;
    if (step_factor > 1) {
        if (min_bytes == 0) throw UserError("-b 0 with -f: multiplying 0 bytes never grows; start at 1 byte or more");
        const auto factor = static_cast<size_t>(step_factor);
        for (size_t s = min_bytes;; s *= factor) {
            sizes.push_back(s);
            if (s > max_bytes / factor) break;  // the next would pass max (or overflow)
        }
        return sizes;
    }
    if (step_bytes == 0) throw UserError("-i 0: a step of 0 bytes never reaches -e");
    const size_t count = (max_bytes - min_bytes) / step_bytes + 1;
    if (count > kMaxSweepSizes)
        throw UserError(fmt::format("-b {} -e {} -i {}: {} sizes, more than {}; use a larger step or -f", min_bytes,
                                    max_bytes, step_bytes, count, kMaxSweepSizes));
    for (size_t k = 0; k < count; ++k) sizes.push_back(min_bytes + k * step_bytes);
    return sizes;
}

const char* nccl_type_name(DType dtype) {
    switch (dtype) {
        case DType::f32: return "float";
        case DType::f16: return "half";
        case DType::bf16: return "bfloat16";
        case DType::i32: return "int32";
    }
    return "unknown";
}

DType parse_comm_dtype(const std::string& text) {
    if (text == "float" || text == "f32" || text == "fp32" || text == "float32") return DType::f32;
    if (text == "half" || text == "f16" || text == "fp16" || text == "float16") return DType::f16;
    if (text == "bfloat16" || text == "bf16") return DType::bf16;
    throw UserError(fmt::format("-d '{}': expected float, half, bfloat16 or all (the dtypes scalebench's "
                                "communicators carry)",
                                text));
}

ReduceOp parse_reduce_op(const std::string& text) {
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max, ReduceOp::min})
        if (text == reduce_op_name(op)) return op;
    throw UserError(fmt::format("--redop '{}': expected sum, avg, max, min or all", text));
}

// ---------------------------------------------------------------- one sweep

namespace {

constexpr size_t kChunkElements = size_t{1} << 22;  // host staging for inputs and checks

class SweepRun {
public:
    SweepRun(const Collective& c, const SweepOptions& opts, Ops& ops, Communicator& comm, MPI_Comm mpi)
        : c_(c), opts_(opts), ops_(ops), comm_(comm), mpi_(mpi), n_(comm.size()), rank_(comm.rank()),
          elt_(dtype_size(opts.dtype)) {
        size_t max_send = 0, max_recv = 0;
        for (size_t bytes : opts.sizes) {
            const CollectiveCounts k = counts(bytes);
            max_send = std::max(max_send, k.send);
            max_recv = std::max({max_recv, k.recv, k.send});  // in place, recv holds either
        }
        try {
            send_ = DeviceBuffer(ops, max_send * elt_);
            recv_ = DeviceBuffer(ops, max_recv * elt_);
        } catch (const std::exception& e) {
            // Not agreed across ranks: main aborts the job, so no rank waits on this one.
            throw UserError(fmt::format("-e {}: {} needs {} + {} bytes of {} memory per rank: {}",
                                        *std::max_element(opts.sizes.begin(), opts.sizes.end()), c.name,
                                        max_send * elt_, max_recv * elt_, ops.name(), e.what()));
        }
        zero(send_.get(), max_send);  // defined contents from the start, even for warm-up
        zero(recv_.get(), max_recv);
    }

    CollectiveCounts counts(size_t bytes) const { return c_.counts(bytes / elt_, elt_, n_); }

    CollectiveArgs args(const CollectiveCounts& k, bool in_place) const {
        CollectiveArgs a;
        a.dtype = opts_.dtype;
        a.op = opts_.redop;
        a.root = opts_.root;
        a.count = k.param;
        char* base = recv_.as<char>();
        a.send = in_place ? base + k.send_inplace_offset * static_cast<size_t>(rank_) * elt_ : send_.get();
        a.recv = in_place ? base + k.recv_inplace_offset * static_cast<size_t>(rank_) * elt_ : recv_.get();
        return a;
    }

    // Untimed runs of each size from the smallest, doubling, and of the largest, so
    // connections and buffers of every protocol exist before timing (nccl-tests' warm-up).
    void warm_up() {
        if (opts_.warmup_iters <= 0 || opts_.sizes.empty()) return;
        const size_t lo = std::max(*std::min_element(opts_.sizes.begin(), opts_.sizes.end()), elt_);
        const size_t hi = *std::max_element(opts_.sizes.begin(), opts_.sizes.end());
        std::vector<size_t> sizes;
        for (size_t s = lo; s <= hi; s *= 2) {
            sizes.push_back(s);
            if (s > hi / 2) break;
        }
        if (sizes.empty() || sizes.back() != hi) sizes.push_back(hi);
        for (size_t bytes : sizes) {
            const CollectiveArgs a = args(counts(bytes), false);
            for (int i = 0; i < opts_.warmup_iters; ++i) complete(c_.run(comm_, a));
        }
        comm_.barrier();
    }

    Measurement measure(size_t bytes, bool in_place) {
        const CollectiveCounts k = counts(bytes);
        const CollectiveArgs a = args(k, in_place);
        Measurement m;
        m.ran = true;
        fill_inputs(a, k, make_context(k, in_place, /*seed=*/0));
        complete(c_.run(comm_, a));  // one run to synchronise, as nccl-tests
        comm_.barrier();

        const double ms = timed_ms(a, k, in_place);
        double mine = ms * 1000.0, sum = 0, max = 0;
        SB_CHECK_MPI(MPI_Allreduce(&mine, &sum, 1, MPI_DOUBLE, MPI_SUM, mpi_));
        SB_CHECK_MPI(MPI_Allreduce(&mine, &max, 1, MPI_DOUBLE, MPI_MAX, mpi_));
        m.time_us = sum / n_;
        m.time_us_max = max;
        const double size_bytes = static_cast<double>(std::max(k.send, k.recv) * elt_);
        m.algbw_gbps = m.time_us > 0 ? size_bytes / 1e3 / m.time_us : 0;  // bytes/us = 1e-3 GB/s
        m.busbw_gbps = m.algbw_gbps * c_.bus_factor(n_);

        m.checked = opts_.check_iters > 0 && (!in_place || c_.checks_in_place);
        for (int iteration = 0; m.checked && iteration < opts_.check_iters; ++iteration) {
            m.wrong = check(a, k, in_place, static_cast<uint64_t>(iteration) + 1);
            if (m.wrong) break;
        }
        return m;
    }

private:
    CheckContext make_context(const CollectiveCounts& k, bool in_place, uint64_t seed) const {
        return make_check_context(opts_.dtype, c_.reduces, rank_, n_, opts_.root, k.param, opts_.redop, in_place,
                                  seed);
    }

    // The collective's completion, and the host's: MPI blocks; NCCL makes the compute
    // stream wait, which the host then waits for.
    void complete(std::unique_ptr<CommRequest> request) {
        request->wait();
        ops_.synchronize();
    }

    // Iteration i's buffers, moved along the allocations as nccl-tests' startColl moves
    // them, cycling through as many places as fit, so that a size the cache could hold is
    // not timed out of the cache: on the H200 (60 MB of L2) reusing one place made 8-16 MB
    // all-reduces look 1.6x faster than nccl-tests. In place, send and recv share one
    // region of max(send, recv); out of place each buffer moves by its own size (all_gather's
    // send is n times smaller than its recv).
    CollectiveArgs at_iteration(CollectiveArgs a, const CollectiveCounts& k, bool in_place, int i) const {
        auto shift = [i](size_t stride, size_t capacity) {
            return stride == 0 ? 0 : stride * (static_cast<size_t>(i) % std::max<size_t>(capacity / stride, 1));
        };
        const size_t send_shift = in_place ? shift(std::max(k.send, k.recv) * elt_, recv_.bytes())
                                           : shift(k.send * elt_, send_.bytes());
        const size_t recv_shift = in_place ? send_shift : shift(k.recv * elt_, recv_.bytes());
        a.send = static_cast<const char*>(a.send) + send_shift;
        a.recv = static_cast<char*>(a.recv) + recv_shift;
        return a;
    }

    // iters launches back to back, timed as one interval on the host clock up to the
    // stream's completion: nccl-tests' definition, so small sizes (where issuing is the
    // cost) read the same. Where collectives are ordered on a stream they are all issued
    // before the last is waited for (which waits for all, and puts them under the
    // collective deadline); on the host (MPI) each completes before the next starts, as
    // MPI forbids touching the buffers of a pending operation.
    double timed_ms(const CollectiveArgs& a, const CollectiveCounts& k, bool in_place) {
        const bool stream_ordered = ops_.stream() != nullptr;
        std::unique_ptr<CommRequest> last;
        const auto start = std::chrono::steady_clock::now();
        for (int i = 0; i < opts_.iters; ++i) {
            last = c_.run(comm_, at_iteration(a, k, in_place, i));
            if (!stream_ordered) last->wait();
        }
        if (stream_ordered) last->wait();
        ops_.synchronize();
        const std::chrono::duration<double, std::milli> elapsed = std::chrono::steady_clock::now() - start;
        return elapsed.count() / opts_.iters;
    }

    void fill_inputs(const CollectiveArgs& a, const CollectiveCounts& k, const CheckContext& ctx) {
        std::vector<unsigned char> host(std::min(k.send, kChunkElements) * elt_);
        char* dst = static_cast<char*>(const_cast<void*>(a.send));
        for (size_t first = 0; first < k.send; first += kChunkElements) {
            const size_t m = std::min(kChunkElements, k.send - first);
            for (size_t j = 0; j < m; ++j)
                store_from_float(opts_.dtype, host.data(), j, static_cast<float>(ctx.input(rank_, first + j)));
            ops_.upload(dst + first * elt_, host.data(), m * elt_);
        }
    }

    void zero(void* data, size_t count) {
        const std::vector<unsigned char> zeros(std::min(count, kChunkElements) * elt_, 0);
        for (size_t first = 0; first < count; first += kChunkElements)
            ops_.upload(static_cast<char*>(data) + first * elt_, zeros.data(),
                        std::min(kChunkElements, count - first) * elt_);
    }

    // One checked run with fresh inputs; returns the wrong elements over all ranks.
    int64_t check(const CollectiveArgs& a, const CollectiveCounts& k, bool in_place, uint64_t seed) {
        const CheckContext ctx = make_context(k, in_place, seed);
        fill_inputs(a, k, ctx);
        if (!in_place) zero(a.recv, k.recv);  // an element the collective leaves out shows as 0
        complete(c_.run(comm_, a));
        if (opts_.tamper) opts_.tamper(ops_, a.recv, k.recv * elt_);

        const double tolerance = opts_.redop == ReduceOp::avg && c_.reduces
                                     ? std::max(2, n_) * dtype_epsilon(opts_.dtype)  // the quotient rounds
                                     : 0.0;
        std::vector<unsigned char> got(std::min(k.recv, kChunkElements) * elt_);
        std::vector<double> want(std::min(k.recv, kChunkElements));
        int64_t wrong = 0;
        for (size_t first = 0; first < k.recv; first += kChunkElements) {
            const size_t m = std::min(kChunkElements, k.recv - first);
            ops_.download(got.data(), static_cast<const char*>(a.recv) + first * elt_, m * elt_);
            c_.expected(ctx, first, m, want.data());
            for (size_t j = 0; j < m; ++j) {
                const double value = load_as_float(opts_.dtype, got.data(), j);
                if (!(value == want[j] || std::fabs(value - want[j]) <= tolerance * std::fabs(want[j]))) ++wrong;
            }
        }
        int64_t total = 0;
        SB_CHECK_MPI(MPI_Allreduce(&wrong, &total, 1, MPI_INT64_T, MPI_SUM, mpi_));
        return total;
    }

    const Collective& c_;
    const SweepOptions& opts_;
    Ops& ops_;
    Communicator& comm_;
    MPI_Comm mpi_;
    const int n_, rank_;
    const size_t elt_;
    DeviceBuffer send_, recv_;
};

}  // namespace

SweepResult run_sweep(const Collective& c, const SweepOptions& opts, Ops& ops, Communicator& comm, MPI_Comm mpi,
                      const std::function<void(const SweepResult&, const SweepRow&)>& on_row) {
    SB_REQUIRE(opts.iters > 0 && !opts.sizes.empty(), "run_sweep: no sizes or no timed launches");
    SB_REQUIRE(!c.rooted || (opts.root >= 0 && opts.root < comm.size()), "run_sweep: root outside the communicator");
    SweepResult result;
    result.collective = &c;
    result.nranks = comm.size();
    result.dtype = opts.dtype;
    result.redop = opts.redop;
    result.root = c.rooted ? opts.root : -1;

    SweepRun run(c, opts, ops, comm, mpi);
    run.warm_up();
    double busbw_sum = 0;
    int measurements = 0;
    std::vector<double> fit_bytes, fit_us;
    for (size_t bytes : opts.sizes) {
        const CollectiveCounts k = run.counts(bytes);
        SweepRow row;
        row.bytes = std::max(k.send, k.recv) * dtype_size(opts.dtype);
        row.count = k.param;
        if (opts.out_of_place) row.out_of_place = run.measure(bytes, false);
        if (opts.in_place) row.in_place = run.measure(bytes, true);
        for (const Measurement* m : {&row.out_of_place, &row.in_place}) {
            if (!m->ran) continue;
            busbw_sum += m->busbw_gbps;
            ++measurements;
            if (m->checked && m->wrong > 0) ++result.wrong_measurements;
        }
        const Measurement& fitted = opts.out_of_place ? row.out_of_place : row.in_place;
        if (row.bytes > 0 && fitted.ran) {
            fit_bytes.push_back(static_cast<double>(row.bytes));
            fit_us.push_back(fitted.time_us);
        }
        result.rows.push_back(row);
        if (on_row) on_row(result, result.rows.back());
    }
    result.avg_busbw_gbps = measurements ? busbw_sum / measurements : 0;
    result.fit = fit_alpha_beta(fit_bytes, fit_us);
    return result;
}

// ---------------------------------------------------------------- alpha-beta fit

AlphaBetaFit fit_alpha_beta(const std::vector<double>& bytes, const std::vector<double>& time_us) {
    AlphaBetaFit fit;
    fit.points = static_cast<int>(std::min(bytes.size(), time_us.size()));
    // Weighted least squares of t = alpha + slope * x with weights 1/t^2 (relative residuals).
    double s = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (int i = 0; i < fit.points; ++i) {
        if (!(time_us[i] > 0)) return fit;
        const double w = 1.0 / (time_us[i] * time_us[i]), x = bytes[i], y = time_us[i];
        s += w;
        sx += w * x;
        sy += w * y;
        sxx += w * x * x;
        sxy += w * x * y;
    }
    const double det = s * sxx - sx * sx;
    if (fit.points < 2 || !(det > 0)) return fit;
    const double slope = (s * sxy - sx * sy) / det;  // us per byte
    fit.alpha_us = (sy - slope * sx) / s;
    if (!(slope > 0)) return fit;
    fit.beta_gbps = 1e-3 / slope;  // bytes/us -> GB/s
    double mean = 0;
    for (int i = 0; i < fit.points; ++i) mean += time_us[i] / fit.points;
    double ss_res = 0, ss_tot = 0;
    for (int i = 0; i < fit.points; ++i) {
        const double predicted = fit.alpha_us + slope * bytes[i];
        ss_res += (time_us[i] - predicted) * (time_us[i] - predicted);
        ss_tot += (time_us[i] - mean) * (time_us[i] - mean);
    }
    fit.r2 = ss_tot > 0 ? 1.0 - ss_res / ss_tot : 1.0;
    fit.valid = true;
    return fit;
}

// ---------------------------------------------------------------- nccl-tests' text

namespace {

// A number in `width` characters with as many decimals (2, 1, 0) as fit, else exponent
// form, as nccl-tests prints times and bandwidths.
std::string fitted_number(double value, int width) {
    char text[64];
    for (int decimals : {2, 1, 0}) {
        std::snprintf(text, sizeof text, "%*.*f", width, decimals, value);
        if (static_cast<int>(std::string(text).size()) <= width) return text;
    }
    std::snprintf(text, sizeof text, width >= 7 ? "%*.1e" : "%*.0e", width, value);
    return text;
}

std::string format_measurement(const Measurement& m) {
    char text[128];
    if (!m.ran) {
        std::snprintf(text, sizeof text, "  %7s  %6s  %6s  %6s", "-", "-", "-", "-");
    } else if (m.checked) {
        std::snprintf(text, sizeof text, "  %7s  %6s  %6s  %6g", fitted_number(m.time_us, 7).c_str(),
                      fitted_number(m.algbw_gbps, 6).c_str(), fitted_number(m.busbw_gbps, 6).c_str(),
                      static_cast<double>(m.wrong));
    } else {
        std::snprintf(text, sizeof text, "  %7s  %6s  %6s    N/A", fitted_number(m.time_us, 7).c_str(),
                      fitted_number(m.algbw_gbps, 6).c_str(), fitted_number(m.busbw_gbps, 6).c_str());
    }
    return text;
}

}  // namespace

std::string format_table_header() {
    char text[1024];
    int n = std::snprintf(text, sizeof text, "# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          \n",
                          "", "", "", "", "");
    n += std::snprintf(text + n, sizeof text - n,
                       "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s\n", "size", "count",
                       "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong",
                       0, "");
    std::snprintf(text + n, sizeof text - n,
                  "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s\n", "(B)", "(elements)", "",
                  "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "", 0, "");
    return text;
}

std::string format_row(const SweepResult& r, const SweepRow& row) {
    char text[256];
    const char* redop = r.collective && r.collective->reduces ? reduce_op_name(r.redop) : "none";
    std::snprintf(text, sizeof text, "%12zu  %12zu  %8s  %6s  %6d", row.bytes, row.count, nccl_type_name(r.dtype), redop,
                  r.root);
    return text + format_measurement(row.out_of_place) + format_measurement(row.in_place) + "\n";
}

std::string format_footer(const SweepResult& r) {
    std::string text = fmt::format("# {:<20} : {} {}\n", "Out of bounds values", r.wrong_measurements,
                                   r.wrong_measurements ? "FAILED" : "OK");
    char bw[64];
    std::snprintf(bw, sizeof bw, "%g", r.avg_busbw_gbps);
    text += fmt::format("# {:<20} : {} \n", "Avg bus bandwidth", bw);
    if (r.fit.valid) {
        const double factor = r.collective ? r.collective->bus_factor(r.nranks) : 1.0;
        text += fmt::format("# {:<20} : alpha {:.4g} us, beta {:.4g} GB/s (busbw {:.4g} GB/s), R^2 {:.4f}, {} sizes\n",
                            "Alpha-beta fit", r.fit.alpha_us, r.fit.beta_gbps, r.fit.beta_gbps * factor, r.fit.r2,
                            r.fit.points);
    } else {
        text += fmt::format("# {:<20} : none (needs two or more sizes whose time grows with size)\n", "Alpha-beta fit");
    }
    text += "#\n";
    return text;
}

namespace {

ParsedPlacement parse_placement(const std::vector<std::string>& f, size_t at, const std::string& line) {
    ParsedPlacement p;
    if (f[at] == "-") {
        p.ran = false;
        return p;
    }
    try {
        p.time_us = std::stod(f[at]);
        p.algbw_gbps = std::stod(f[at + 1]);
        p.busbw_gbps = std::stod(f[at + 2]);
        p.wrong = f[at + 3] == "N/A" ? -1 : static_cast<int64_t>(std::stod(f[at + 3]));
    } catch (const std::exception&) {
        throw std::runtime_error("nccl-tests row with a field that is not a number: " + line);
    }
    return p;
}

// The number after the ':' of a closing line.
double closing_value(const std::string& line) {
    const auto colon = line.find(':');
    try {
        return std::stod(line.substr(colon + 1));
    } catch (const std::exception&) {
        throw std::runtime_error("nccl-tests closing line without a number: " + line);
    }
}

}  // namespace

ParsedTable parse_nccl_tests_output(const std::string& text) {
    ParsedTable table;
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) {
        const auto start = line.find_first_not_of(" \t");
        if (start == std::string::npos) continue;
        if (line[start] == '#') {
            if (line.find("Avg bus bandwidth") != std::string::npos) {
                table.has_avg_busbw = true;
                table.avg_busbw_gbps = closing_value(line);
            } else if (line.find("Out of bounds values") != std::string::npos) {
                table.has_out_of_bounds = true;
                table.out_of_bounds = static_cast<int>(closing_value(line));
            }
            continue;
        }
        if (!std::isdigit(static_cast<unsigned char>(line[start]))) continue;  // e.g. NCCL INFO lines
        std::istringstream words(line);
        std::vector<std::string> f;
        for (std::string w; words >> w;) f.push_back(w);
        if (f.size() != 13) continue;
        ParsedRow row;
        try {
            row.bytes = std::stoull(f[0]);
            row.count = std::stoull(f[1]);
            row.root = std::stoi(f[4]);
        } catch (const std::exception&) {
            throw std::runtime_error("nccl-tests row with a size, count or root that is not a number: " + line);
        }
        row.type = f[2];
        row.redop = f[3];
        row.out_of_place = parse_placement(f, 5, line);
        row.in_place = parse_placement(f, 9, line);
        table.rows.push_back(row);
    }
    return table;
}

}  // namespace sb
