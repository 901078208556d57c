// The records that bracket a run (see run_records.h): the start record, the end record or the
// `incomplete` one (from main's error paths, the collective deadline's abort, the stop
// signals' handlers, an exit() during the run) and the record-guard process.
#include "src/system/run_records.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "collectives/deadline.h"
#include "base/errors.h"
#include "src/core/results.h"
#include "src/system/backend.h"
#include "src/system/environment.h"

namespace sb {

namespace {

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
constexpr int kCauses = 6;  // the four signals, an exit() during the run, then SIGTERM after a stall
constexpr int kStalledSigterm = 5;
char g_signal_lines[kCauses][2048];
// Whether this process stood still (SIGSTOP, a frozen host) for longer than the collective
// timeout: the other ranks then found it had stopped answering and ended the job, and the
// launcher's SIGTERM is the consequence, not the cause. A heartbeat thread stamps the monotonic
// clock every 200 ms and notes a gap past the timeout; the handler reads both (clock_gettime is
// async-signal-safe), whichever of it and the thread runs first when the process is continued.
std::atomic<int64_t> g_heartbeat_ns{0};
std::atomic<int64_t> g_stall_seen_at_ns{-1};  // when the heartbeat last found such a gap
std::atomic<int64_t> g_stall_ns{0};            // the collective timeout, in ns (set when a run is armed)

int64_t monotonic_ns() {
    timespec ts {};
    ::clock_gettime(CLOCK_MONOTONIC, &ts);
    return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

// Whether the process has just come back from a stall (the gap now, or one the heartbeat saw
// in the last 10 s).
bool just_stalled() {
    const int64_t now = monotonic_ns(), beat = g_heartbeat_ns.load(), seen = g_stall_seen_at_ns.load();
    return g_stall_ns > 0 && beat > 0 &&
           (now - beat > g_stall_ns || (seen >= 0 && now - seen < int64_t{10} * 1000000000));
}

void start_heartbeat() {
    static std::once_flag started;
    std::call_once(started, [] {
        g_heartbeat_ns = monotonic_ns();
        std::thread([] {
            for (;;) {
                ::usleep(200000);
                const int64_t now = monotonic_ns();
                if (now - g_heartbeat_ns.load() > g_stall_ns) g_stall_seen_at_ns = now;
                g_heartbeat_ns = now;
            }
        }).detach();
    });
}
std::atomic<bool> g_signal_armed{false};
bool g_guard_enabled = false;
int g_guard_fd = -1;  // write end of the pipe to the record guard (rank 0, during a run)
constexpr int kGuardFd = 3;  // the read end, in the guard process

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
        if (::write(fd, line + skip, n - skip) != static_cast<ssize_t>(n - skip) && S_ISREG(st.st_mode)) {
            int ignored = ::ftruncate(fd, st.st_size);  // a full disk: no torn record (see append_record)
            (void)ignored;
        }
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
            if (kStopSignals[i] == sig)
                write_prepared_line(g_signal_lines[sig == SIGTERM && just_stalled() ? kStalledSigterm : i]);
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
    message += "R " + json_text(incomplete_record(g_record_subcommand, why)) + "\n";
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
        "went away)",
        ""};
    const std::string stalled = fmt::format(
        "stopped running for longer than the collective timeout ({:g} s; stopped by SIGSTOP, or its host froze): the "
        "other ranks found it had stopped answering, and the launcher then ended the job (SIGTERM)",
        collective_timeout_s());
    why[kStalledSigterm] = stalled.c_str();
    for (int i = 0; i < kCauses; ++i) {
        std::string line = json_text(incomplete_record(g_record_subcommand, fmt::format("{} {}", me(), why[i])));
        line.pop_back();  // the closing brace; the handler appends the timestamp and closes it
        if (line.size() >= sizeof g_signal_lines[i]) return;  // not armed: main's paths still write it
        std::memcpy(g_signal_lines[i], line.c_str(), line.size() + 1);
    }
    send_guard_the_run();
    g_stall_ns = static_cast<int64_t>(std::max(1.0, collective_timeout_s()) * 1e9);
    start_heartbeat();
    static bool installed = false;
    if (!installed) {
        for (int sig : kStopSignals) std::signal(sig, on_stop_signal);
        std::atexit(on_exit_during_run);
        installed = true;
    }
    g_signal_armed = true;
}

}  // namespace

std::string new_run_id() {
    std::random_device random;
    const uint64_t bits = (uint64_t{random()} << 32) ^ random() ^ static_cast<uint64_t>(::getpid());
    return fmt::format("{:016x}", bits);
}

void begin_run(const std::vector<std::string>& outputs, const std::string& subcommand, MPI_Comm world) {
    int rank = 0, size = 1;
    SB_CHECK_MPI(MPI_Comm_rank(world, &rank));
    SB_CHECK_MPI(MPI_Comm_size(world, &size));
    char id[17] = {};
    if (rank == 0) std::snprintf(id, sizeof id, "%s", new_run_id().c_str());
    SB_CHECK_MPI(MPI_Bcast(id, 16, MPI_CHAR, 0, world));
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
            } catch (const std::exception& e) {  // the path was checked: a failed write is internal (exit 1)
                write_incomplete_record(e.what());  // closes the outputs that took the start record
                throw;
            }
            std::lock_guard<std::mutex> lock(g_record_mutex);
            g_record_outs.push_back(out);
        }
        {
            std::lock_guard<std::mutex> lock(g_record_mutex);
            arm_signal_records();
        }
        set_incomplete_recorder(write_incomplete_record);  // the deadline's abort closes the run
    }
    SB_CHECK_MPI(MPI_Barrier(world));  // no rank starts work before the start record is written
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
    nlohmann::json incomplete = parse_json_or_discarded(record);
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

void record_incomplete(const std::string& error) { write_incomplete_record(error); }

}  // namespace sb
