// Collective timeout, the ping side channel, the watchdog thread and the job abort that
// writes the "incomplete" record (see watchdog.h). The thread never calls MPI except
// MPI_Abort; pings are answered by the main thread while it waits, so a rank that is
// stopped (SIGSTOP, a hung driver) is the one that does not answer.
#include "src/system/watchdog.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "src/system/backend.h"
#include "src/system/environment.h"
#include "src/core/errors.h"
#include "src/core/results.h"

namespace sb {

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kPingTag = 1, kPongTag = 2, kNoticeTag = 3;
constexpr double kDefaultTimeoutS = 600;

double read_timeout() {
    const char* text = std::getenv("SCALEBENCH_COLLECTIVE_TIMEOUT_S");
    if (!text || !*text) return kDefaultTimeoutS;
    char* end = nullptr;
    const double t = std::strtod(text, &end);
    if (*end != '\0' || !(t > 0))
        throw UserError(fmt::format("SCALEBENCH_COLLECTIVE_TIMEOUT_S='{}': expected seconds > 0", text));
    return t;
}

std::atomic<double> g_timeout{-1};
MPI_Comm g_side = MPI_COMM_NULL;  // duplicate of world: pings, pongs, notices to rank 0
std::vector<std::string> g_hosts;  // by world rank
std::atomic<bool> g_aborting{false};
Clock::time_point g_last_served;

// The run's records. What a signal handler writes is prepared in advance (the handler
// only formats a time and calls open/fstat/pread/write/fsync, which are async-signal-safe).
std::mutex g_record_mutex;
std::vector<std::string> g_record_outs;  // rank 0's output files while a run is open
std::string g_record_subcommand;
constexpr int kMaxOutputs = 2;
char g_signal_paths[kMaxOutputs][4096];
int g_signal_path_count = 0;
// Per cause, the incomplete record without its closing ",\"timestamp\":...}".
constexpr int kStopSignals[] = {SIGTERM, SIGINT, SIGHUP, SIGPIPE};
constexpr int kCauses = 5;  // the four signals, then an exit() during the run
char g_signal_lines[kCauses][2048];
std::atomic<bool> g_signal_armed{false};
pid_t g_parent = 0;  // the launcher (or its daemon): a change means it ended
bool g_guard_enabled = false;
int g_guard_fd = -1;  // write end of the pipe to the record guard (rank 0, during a run)
constexpr int kGuardFd = 3;  // the read end, in the guard process

// Watchdog thread state.
std::mutex g_mutex;
std::condition_variable g_cv;
std::thread g_thread;
bool g_stop = false;
std::atomic<long> g_next_id{1};
std::map<long, std::pair<std::string, Clock::time_point>> g_scopes;  // what, deadline
std::map<long, std::function<std::string()>> g_monitors;
std::mutex g_monitor_mutex;  // held while monitors run, so unregister waits for them

std::string rank_and_host(int rank) {
    const std::string host = rank >= 0 && rank < static_cast<int>(g_hosts.size()) ? g_hosts[rank] : "?";
    return fmt::format("{} ({})", rank, host);
}

std::string me() {
    const ProcessInfo& p = process_info();
    return fmt::format("rank {} on {}", p.world_rank, p.host.empty() ? "?" : p.host);
}

// "2024-05-01T12:00:00Z" from the epoch seconds without libc's non-reentrant calls
// (Howard Hinnant's civil_from_days), usable in a signal handler.
void format_utc(time_t t, char* out) {
    long days = static_cast<long>(t / 86400), secs = static_cast<long>(t % 86400);
    days += 719468;
    const long era = (days >= 0 ? days : days - 146096) / 146097;
    const long doe = days - era * 146097;
    const long yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    const long doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    const long mp = (5 * doy + 2) / 153;
    const long d = doy - (153 * mp + 2) / 5 + 1, m = mp < 10 ? mp + 3 : mp - 9;
    const long y = yoe + era * 400 + (m <= 2);
    const long v[6] = {y, m, d, secs / 3600, secs / 60 % 60, secs % 60};
    const int widths[6] = {4, 2, 2, 2, 2, 2};
    const char seps[6] = {'-', '-', 'T', ':', ':', 'Z'};
    char* p = out;
    for (int i = 0; i < 6; ++i) {
        for (int k = widths[i] - 1; k >= 0; --k) {
            long x = v[i];
            for (int j = 0; j < k; ++j) x /= 10;
            *p++ = static_cast<char>('0' + x % 10);
        }
        *p++ = seps[i];
    }
    *p = '\0';
}

// Tells the record guard the run is closed: it has nothing to write (async-signal-safe).
void tell_guard_closed() {
    if (g_guard_fd < 0) return;
    ssize_t ignored = ::write(g_guard_fd, "C\n", 2);
    (void)ignored;
}

// Appends `line` + timestamp to every output, on a fresh line (see append_record).
void write_prepared_line(const char* prepared) {
    char stamp[32];
    format_utc(std::time(nullptr), stamp);
    char line[sizeof g_signal_lines[0] + 64];
    size_t n = 0;
    auto put = [&](const char* text) {
        const size_t len = std::strlen(text);
        std::memcpy(line + n, text, len);
        n += len;
    };
    put("\n");
    put(prepared);
    put(",\"timestamp\":\"");
    put(stamp);
    put("\"}\n");
    int fds[kMaxOutputs];
    for (int i = 0; i < g_signal_path_count; ++i) {
        int fd = fds[i] = ::open(g_signal_paths[i], O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (fd < 0) continue;
        struct stat st {};
        char last = '\n';
        if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
            if (::pread(fd, &last, 1, st.st_size - 1) != 1) last = '\n';
        }
        const size_t skip = last == '\n' ? 1 : 0;  // the leading newline only after a torn line
        ssize_t ignored = ::write(fd, line + skip, n - skip);
        (void)ignored;
    }
    tell_guard_closed();  // before the slow part, so a SIGKILL during fsync leaves no second record
    for (int i = 0; i < g_signal_path_count; ++i)
        if (fds[i] >= 0) {
            ::fsync(fds[i]);
            ::close(fds[i]);
        }
}

extern "C" void on_stop_signal(int sig) {
    if (g_signal_armed.exchange(false)) {
        for (int i = 0; i < 4; ++i)
            if (kStopSignals[i] == sig) write_prepared_line(g_signal_lines[i]);
    }
    std::signal(sig, SIG_DFL);
    std::raise(sig);
}

// exit() called while the run is open (a library ending the process: Open MPI's does when
// its launcher goes away): the run did not finish.
extern "C" void on_exit_during_run() {
    if (g_signal_armed.exchange(false)) {
        write_prepared_line(g_signal_lines[4]);
    }
}

nlohmann::json incomplete_record(const std::string& subcommand, const std::string& error) {
    const ProcessInfo& p = process_info();
    return {{"schema_version", kSchemaVersion}, {"subcommand", "incomplete"}, {"run_subcommand", subcommand},
            {"run_id", run_id()}, {"complete", false}, {"error", error}, {"rank", p.world_rank}, {"host", p.host}};
}

// Rank 0 closes the open run with `record` (nothing when no run is open).
void close_run(nlohmann::json record) {
    std::lock_guard<std::mutex> lock(g_record_mutex);
    g_signal_armed = false;  // one closing record per run
    if (g_record_outs.empty()) return;
    char stamp[32];
    format_utc(std::time(nullptr), stamp);
    record["timestamp"] = stamp;
    for (const std::string& out : g_record_outs) {
        try {
            append_record(out, record);
        } catch (const std::exception& e) {
            fmt::print(stderr, "scalebench: could not write the {} record: {}\n", record["subcommand"].get<std::string>(),
                       e.what());
        }
    }
    g_record_outs.clear();
    tell_guard_closed();
}

void write_incomplete_record(const std::string& error) {
    if (process_info().world_rank != 0) return;
    close_run(incomplete_record(g_record_subcommand, error));
}

// Starts the record guard (once) and sends it the open run: "P path" per output and
// "R record" (the incomplete record it writes, without timestamp), one per line.
void send_guard_the_run() {
    if (!g_guard_enabled) return;
    if (g_guard_fd < 0) {
        int fds[2];
        if (::pipe2(fds, O_CLOEXEC) != 0) return;
        posix_spawn_file_actions_t actions;
        posix_spawn_file_actions_init(&actions);
        posix_spawn_file_actions_adddup2(&actions, fds[0], kGuardFd);  // dup2 clears close-on-exec
        for (int fd = 0; fd < 3; ++fd)
            posix_spawn_file_actions_addopen(&actions, fd, "/dev/null", fd == 0 ? O_RDONLY : O_WRONLY, 0);
        posix_spawnattr_t attr;
        posix_spawnattr_init(&attr);
        posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID);  // out of the job's process group: its kills
        char* argv[] = {const_cast<char*>("/proc/self/exe"), const_cast<char*>(kRecordGuardArgument), nullptr};
        pid_t pid = 0;
        const int rc = posix_spawn(&pid, "/proc/self/exe", &actions, &attr, argv, environ);
        posix_spawn_file_actions_destroy(&actions);
        posix_spawnattr_destroy(&attr);
        ::close(fds[0]);
        if (rc != 0) {
            ::close(fds[1]);
            return;
        }
        g_guard_fd = fds[1];
    }
    const std::string why = fmt::format("{} ended before the run finished without writing its record (killed by "
                                        "SIGKILL, or ended by the MPI library when its launcher went away)", me());
    std::string message;
    for (const std::string& out : g_record_outs) message += "P " + out + "\n";
    message += "R " + incomplete_record(g_record_subcommand, why).dump() + "\n";
    for (size_t done = 0; done < message.size();) {
        const ssize_t n = ::write(g_guard_fd, message.data() + done, message.size() - done);
        if (n <= 0) return;
        done += static_cast<size_t>(n);
    }
}

// Prepares what the handlers write for the open run, and installs them (rank 0).
void arm_signal_records() {
    g_signal_path_count = 0;
    for (const std::string& out : g_record_outs)
        if (out.size() < sizeof g_signal_paths[0] && g_signal_path_count < kMaxOutputs)
            std::memcpy(g_signal_paths[g_signal_path_count++], out.c_str(), out.size() + 1);
    const char* why[kCauses] = {
        "received SIGTERM: the launcher stopped the job (a rank failed, a time limit, or the launcher was stopped)",
        "received SIGINT: the job was interrupted (Ctrl-C, or the launcher was interrupted)",
        "received SIGHUP: the terminal or the launcher went away",
        "received SIGPIPE: its output pipe closed (the launcher went away)",
        "exited before the run finished, without an error of its own (the MPI library ends a process whose launcher "
        "went away)"};
    for (int i = 0; i < kCauses; ++i) {
        std::string line = incomplete_record(g_record_subcommand, fmt::format("{} {}", me(), why[i])).dump();
        line.pop_back();  // the closing brace; the handler appends the timestamp and closes it
        if (line.size() >= sizeof g_signal_lines[i]) return;  // not armed: main's paths still write it
        std::memcpy(g_signal_lines[i], line.c_str(), line.size() + 1);
    }
    send_guard_the_run();
    static bool installed = false;
    if (!installed) {
        for (int sig : kStopSignals) std::signal(sig, on_stop_signal);
        std::atexit(on_exit_during_run);
        installed = true;
    }
    g_signal_armed = true;
}

void watchdog_loop() {
    std::unique_lock<std::mutex> lock(g_mutex);
    while (!g_stop) {
        g_cv.wait_for(lock, std::chrono::milliseconds(100));
        if (g_stop) break;
        if (g_parent > 1 && ::getppid() != g_parent) {
            // The launcher ended without stopping this rank: nothing would ever end it.
            fmt::print(stderr, "scalebench: error: {}: its launcher (pid {}) ended; stopping\n", me(), g_parent);
            write_incomplete_record(fmt::format("{}: its launcher (pid {}) ended while the run was going", me(), g_parent));
            _exit(1);
        }
        const auto now = Clock::now();
        for (const auto& [id, scope] : g_scopes)
            if (now > scope.second)
                abort_job(fmt::format("{}: {} did not complete within {} s; a rank stopped answering", me(),
                                      scope.first, collective_timeout_s()));
        lock.unlock();
        {
            std::lock_guard<std::mutex> monitors(g_monitor_mutex);
            for (auto& [id, poll] : g_monitors) {
                std::string failure = poll();
                if (!failure.empty()) abort_job(failure);
            }
        }
        lock.lock();
    }
}

// World ranks of comm's members.
std::vector<int> world_ranks(MPI_Comm comm) {
    MPI_Group group, world;
    int size = 0;
    PMPI_Comm_group(comm, &group);
    PMPI_Comm_group(MPI_COMM_WORLD, &world);
    PMPI_Group_size(group, &size);
    std::vector<int> local(static_cast<size_t>(size)), global(static_cast<size_t>(size));
    for (int i = 0; i < size; ++i) local[i] = i;
    PMPI_Group_translate_ranks(group, size, local.data(), world, global.data());
    PMPI_Group_free(&group);
    PMPI_Group_free(&world);
    return global;
}

void serve_now(std::vector<char>* answered, int round) {
    int flag = 0;
    MPI_Status status;
    for (;;) {
        PMPI_Iprobe(MPI_ANY_SOURCE, kPingTag, g_side, &flag, &status);
        if (!flag) break;
        int payload = 0;
        PMPI_Recv(&payload, 1, MPI_INT, status.MPI_SOURCE, kPingTag, g_side, MPI_STATUS_IGNORE);
        PMPI_Send(&payload, 1, MPI_INT, status.MPI_SOURCE, kPongTag, g_side);  // eager: a stopped peer cannot block it
    }
    for (;;) {
        PMPI_Iprobe(MPI_ANY_SOURCE, kPongTag, g_side, &flag, &status);
        if (!flag) break;
        int payload = 0;
        PMPI_Recv(&payload, 1, MPI_INT, status.MPI_SOURCE, kPongTag, g_side, MPI_STATUS_IGNORE);
        if (answered && payload == round) (*answered)[static_cast<size_t>(status.MPI_SOURCE)] = 1;
    }
    if (process_info().world_rank == 0) {
        PMPI_Iprobe(MPI_ANY_SOURCE, kNoticeTag, g_side, &flag, &status);
        if (flag) {
            int length = 0;
            PMPI_Get_count(&status, MPI_CHAR, &length);
            std::string text(static_cast<size_t>(length), '\0');
            PMPI_Recv(text.data(), length, MPI_CHAR, status.MPI_SOURCE, kNoticeTag, g_side, MPI_STATUS_IGNORE);
            abort_job(text);
        }
    }
}

}  // namespace

double collective_timeout_s() {
    double t = g_timeout.load();
    if (t < 0) {
        t = read_timeout();
        g_timeout = t;
    }
    return t;
}

void set_collective_timeout_s(double seconds) { g_timeout = seconds; }

void init_fault_handling(MPI_Comm world) {
    collective_timeout_s();  // a bad value is a UserError now, not at the first wait
    SB_CHECK_MPI(MPI_Comm_set_errhandler(world, MPI_ERRORS_RETURN));
    SB_CHECK_MPI(PMPI_Comm_dup(world, &g_side));
    int size = 1;
    SB_CHECK_MPI(MPI_Comm_size(world, &size));
    std::vector<char> names(static_cast<size_t>(size) * MPI_MAX_PROCESSOR_NAME, '\0');
    std::string mine = process_info().host.substr(0, MPI_MAX_PROCESSOR_NAME - 1);
    mine.resize(MPI_MAX_PROCESSOR_NAME, '\0');
    SB_CHECK_MPI(PMPI_Allgather(mine.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR, names.data(), MPI_MAX_PROCESSOR_NAME,
                                MPI_CHAR, world));
    g_hosts.clear();
    for (int r = 0; r < size; ++r) g_hosts.emplace_back(names.data() + static_cast<size_t>(r) * MPI_MAX_PROCESSOR_NAME);
    // Under a launcher (not a singleton, whose parent is a shell that may end on purpose).
    if (std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMIX_RANK") || std::getenv("PMI_RANK"))
        g_parent = ::getppid();
    std::lock_guard<std::mutex> lock(g_mutex);
    g_stop = false;
    if (!g_thread.joinable()) g_thread = std::thread(watchdog_loop);
}

void shutdown_fault_handling() {
    {
        std::lock_guard<std::mutex> lock(g_mutex);
        g_stop = true;
    }
    g_cv.notify_all();
    if (g_thread.joinable()) g_thread.join();
    if (g_side != MPI_COMM_NULL) PMPI_Comm_free(&g_side);
}

void begin_run(const std::vector<std::string>& outputs, const std::string& subcommand, MPI_Comm world) {
    int rank = 0, size = 1;
    SB_CHECK_MPI(MPI_Comm_rank(world, &rank));
    SB_CHECK_MPI(MPI_Comm_size(world, &size));
    char id[17] = {};
    if (rank == 0) {
        std::random_device random;
        const uint64_t bits = (uint64_t{random()} << 32) ^ random() ^ static_cast<uint64_t>(::getpid());
        std::snprintf(id, sizeof id, "%016llx", static_cast<unsigned long long>(bits));
    }
    SB_CHECK_MPI(MPI_Bcast(id, 16, MPI_CHAR, 0, world));
    std::string error;
    {
        std::lock_guard<std::mutex> lock(g_record_mutex);
        set_run_id(id);
        g_record_subcommand = subcommand;
        g_record_outs.clear();
    }
    if (rank == 0) {
        const ProcessInfo& p = process_info();
        char stamp[32];
        format_utc(std::time(nullptr), stamp);
        const nlohmann::json start = {{"schema_version", kSchemaVersion}, {"subcommand", "start"},
                                      {"run_subcommand", subcommand},     {"run_id", run_id()},
                                      {"timestamp", stamp},               {"launched_world_size", size},
                                      {"host", p.host},                   {"pid", static_cast<int>(::getpid())}};
        for (const std::string& out : outputs) {
            try {
                append_record(out, start);
            } catch (const std::exception& e) {
                error = e.what();
                break;
            }
            std::lock_guard<std::mutex> lock(g_record_mutex);
            g_record_outs.push_back(out);
        }
        if (!error.empty()) {
            write_incomplete_record(error);  // closes the outputs that took the start record
        } else {
            std::lock_guard<std::mutex> lock(g_record_mutex);
            arm_signal_records();
        }
    }
    try {
        agree_on_errors(world, error);
    } catch (...) {
        set_run_id("");
        throw;
    }
}

void end_run(int exit_code) {
    if (process_info().world_rank == 0)
        close_run({{"schema_version", kSchemaVersion}, {"subcommand", "end"}, {"run_subcommand", g_record_subcommand},
                   {"run_id", run_id()}, {"complete", true}, {"exit_code", exit_code}});
    set_run_id("");
}

void enable_record_guard() { g_guard_enabled = true; }

int run_record_guard() {
    ::setsid();
    for (int sig : kStopSignals) std::signal(sig, SIG_IGN);  // only rank 0's end ends the guard
    const long limit = std::min(::sysconf(_SC_OPEN_MAX), 65536L);
    for (int fd = kGuardFd + 1; fd < limit; ++fd) ::close(fd);  // the MPI sockets rank 0 left open
    std::vector<std::string> outputs;
    std::string record, pending;
    bool closed = true;
    char buffer[4096];
    for (;;) {
        const ssize_t n = ::read(kGuardFd, buffer, sizeof buffer);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;  // rank 0 ended
        pending.append(buffer, static_cast<size_t>(n));
        for (size_t eol; (eol = pending.find('\n')) != std::string::npos; pending.erase(0, eol + 1)) {
            const std::string line = pending.substr(0, eol);
            if (line.rfind("P ", 0) == 0) {
                if (closed) outputs.clear();
                closed = false;
                outputs.push_back(line.substr(2));
            } else if (line.rfind("R ", 0) == 0) {
                record = line.substr(2);
            } else if (line == "C") {
                closed = true;
            }
        }
    }
    if (closed || record.empty()) return 0;
    nlohmann::json incomplete = nlohmann::json::parse(record, nullptr, false);
    if (!incomplete.is_object()) return 1;
    char stamp[32];
    format_utc(std::time(nullptr), stamp);
    incomplete["timestamp"] = stamp;
    for (const std::string& out : outputs) {
        try {
            append_record(out, incomplete);
        } catch (const std::exception&) {
        }
    }
    return 0;
}

struct StartupDeadline::State {
    std::mutex mutex;
    std::condition_variable cv;
    bool passed = false;
    std::thread thread;
};

namespace {
// The timeout before MPI is up: SCALEBENCH_COLLECTIVE_TIMEOUT_S when it is valid (a bad
// value is reported once MPI runs), else the default.
double startup_timeout_s() {
    try {
        return read_timeout();
    } catch (const std::exception&) {
        return kDefaultTimeoutS;
    }
}

// This process's rank as the launcher gave it (MPI cannot say yet), or "?".
std::string launcher_rank() {
    for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"})
        if (const char* value = std::getenv(name)) return value;
    return "?";
}
}  // namespace

StartupDeadline::StartupDeadline() : state_(new State) {
    const double timeout = startup_timeout_s();
    State* s = state_;
    s->thread = std::thread([s, timeout] {
        std::unique_lock<std::mutex> lock(s->mutex);
        if (s->cv.wait_for(lock, std::chrono::duration<double>(timeout), [s] { return s->passed; })) return;
        char host[256] = {};
        ::gethostname(host, sizeof host - 1);
        fmt::print(stderr, "scalebench: error: rank {} on {}: MPI start-up (MPI_Init and the first collective) did not "
                           "complete within {} s: a rank did not arrive (stopped, or failed to start)\n",
                   launcher_rank(), host, timeout);
        std::fflush(stderr);
        _exit(1);
    });
}

void StartupDeadline::passed() {
    {
        std::lock_guard<std::mutex> lock(state_->mutex);
        state_->passed = true;
    }
    state_->cv.notify_all();
    if (state_->thread.joinable()) state_->thread.join();
}

StartupDeadline::~StartupDeadline() {
    passed();
    delete state_;
}

int finalize_with_deadline(int code) {
    const double timeout = collective_timeout_s();
    std::thread([timeout, code] {
        std::this_thread::sleep_for(std::chrono::duration<double>(timeout));
        fmt::print(stderr, "scalebench: warning: MPI_Finalize did not complete within {} s (the launcher does not "
                           "answer); exiting with the run's code {}\n", timeout, code);
        std::fflush(stderr);
        _exit(code);
    }).detach();
    MPI_Finalize();
    return code;
}

void serve_side_channel() {
    if (g_side == MPI_COMM_NULL) return;
    const auto now = Clock::now();
    if (now - g_last_served < std::chrono::milliseconds(20)) return;
    g_last_served = now;
    serve_now(nullptr, 0);
}

void wait_requests(int count, MPI_Request* requests, MPI_Comm comm, const char* what) {
    int flag = 0;
    int rc = PMPI_Testall(count, requests, &flag, MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS) throw_call_error("MPI", what, mpi_error_string(rc), __FILE__, __LINE__);
    if (flag) return;
    const auto start = Clock::now();
    const auto timeout = std::chrono::duration<double>(collective_timeout_s());
    auto deadline = start + std::chrono::duration_cast<Clock::duration>(timeout);
    for (long spins = 0;; ++spins) {
        serve_side_channel();
        rc = PMPI_Testall(count, requests, &flag, MPI_STATUSES_IGNORE);
        if (rc != MPI_SUCCESS) throw_call_error("MPI", what, mpi_error_string(rc), __FILE__, __LINE__);
        if (flag) return;
        const auto now = Clock::now();
        if (now > deadline) {
            collective_deadline_passed(what, comm, std::chrono::duration<double>(now - start).count());
            deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(timeout);
        }
        if (spins > 10000) std::this_thread::yield();  // a long wait: leave the core to the other ranks
    }
}

void collective_deadline_passed(const char* what, MPI_Comm comm, double waited_s) {
    const double timeout = collective_timeout_s();
    if (g_side == MPI_COMM_NULL)
        abort_job(fmt::format("{}: collective {} did not complete within {} s", me(), what, timeout));
    const int self = process_info().world_rank;
    int world_size = 1;
    PMPI_Comm_size(g_side, &world_size);
    static int round = 0;
    static std::vector<int> payloads;
    ++round;
    payloads.assign(static_cast<size_t>(world_size), round);
    const std::vector<int> peers = world_ranks(comm);
    for (int peer : peers) {
        if (peer == self) continue;
        MPI_Request r;
        PMPI_Isend(&payloads[static_cast<size_t>(peer)], 1, MPI_INT, peer, kPingTag, g_side, &r);
        PMPI_Request_free(&r);
    }
    // Peers waiting in MPI answer within microseconds; one in a long compute phase
    // answers at its next test() of a bucket. Grace: half the timeout, 1 to 10 s.
    const double grace = std::min(10.0, std::max(1.0, timeout / 2));
    std::vector<char> answered(static_cast<size_t>(world_size), 0);
    answered[static_cast<size_t>(self)] = 1;
    const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(grace));
    auto all_answered = [&] {
        for (int peer : peers)
            if (!answered[static_cast<size_t>(peer)]) return false;
        return true;
    };
    while (Clock::now() < until && !all_answered()) {
        serve_now(&answered, round);
        std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    std::vector<std::string> missing;
    bool rank0_missing = false;
    for (int peer : peers)
        if (!answered[static_cast<size_t>(peer)]) {
            missing.push_back(rank_and_host(peer));
            rank0_missing |= peer == 0;
        }
    if (missing.empty()) {
        fmt::print(stderr, "scalebench: warning: {}: collective {} has waited {:.0f} s; every rank of it answers, "
                           "so it keeps waiting\n", me(), what, waited_s);
        return;
    }
    const std::string message =
        fmt::format("{}: collective {} did not complete within {} s; rank(s) {} stopped answering", me(), what,
                    timeout, fmt::join(missing, ", "));
    if (self != 0 && !rank0_missing) {
        // Rank 0 writes the incomplete record and aborts; give it the grace to do so.
        static std::string notice;
        notice = message;
        MPI_Request r;
        PMPI_Isend(notice.data(), static_cast<int>(notice.size()), MPI_CHAR, 0, kNoticeTag, g_side, &r);
        PMPI_Request_free(&r);
        const auto wait_until = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                   std::chrono::duration<double>(grace));
        while (Clock::now() < wait_until) {
            serve_now(nullptr, 0);
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
    }
    abort_job(message);
}

[[noreturn]] void abort_job(const std::string& message) {
    if (g_aborting.exchange(true)) {
        for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));  // another thread is aborting the job
    }
    fmt::print(stderr, "scalebench: error: {}\n", message);
    std::fflush(stderr);
    write_incomplete_record(message);
    MPI_Abort(MPI_COMM_WORLD, 1);
    _exit(1);
}

void record_incomplete(const std::string& error) { write_incomplete_record(error); }

WatchdogScope::WatchdogScope(std::string what) : id_(g_next_id++) {
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(collective_timeout_s()));
    std::lock_guard<std::mutex> lock(g_mutex);
    g_scopes.emplace(id_, std::make_pair(std::move(what), deadline));
}

WatchdogScope::~WatchdogScope() {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_scopes.erase(id_);
}

long register_monitor(std::function<std::string()> poll) {
    const long id = g_next_id++;
    std::lock_guard<std::mutex> lock(g_monitor_mutex);
    g_monitors.emplace(id, std::move(poll));
    return id;
}

void unregister_monitor(long id) {
    std::lock_guard<std::mutex> lock(g_monitor_mutex);
    g_monitors.erase(id);
}

}  // namespace sb
