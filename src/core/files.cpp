// Input and output files checked before use: type and size before a read, identity and
// type before a write (see files.h).
#include "src/core/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>

#include <fmt/format.h>

#include "base/errors.h"
#include "src/core/choices.h"
#include "src/core/data_dir.h"

namespace sb {

namespace {

// Inputs and outputs of this process, by identity: "id DEV INO" for a file that exists
// (another spelling of the path or a link is the same file), "path P" (resolved) for one not
// made yet.
std::mutex g_mutex;
std::map<std::string, std::string> g_inputs;  // -> "the config file PATH"
struct CheckedOutput {
    std::string flag;
    std::string path;
    OutputKind kind;
};
std::map<std::string, CheckedOutput> g_outputs;

std::string identity(const std::string& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0) return fmt::format("id {} {}", st.st_dev, st.st_ino);
    std::error_code ec;
    const std::filesystem::path resolved = std::filesystem::weakly_canonical(path, ec);
    return "path " + (ec ? path : resolved.string());
}

// "a FIFO", "a character device", ... for a file that is not regular.
const char* kind_of(mode_t mode) {
    if (S_ISDIR(mode)) return "a folder";
    if (S_ISFIFO(mode)) return "a FIFO";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISSOCK(mode)) return "a socket";
    return "not a regular file";
}

std::string with_flag(const std::string& flag, const std::string& path) {
    return flag.empty() ? printable(path) : fmt::format("{} {}", flag, printable(path));
}

// The nearest folder above `path` that exists ("." for a bare name).
std::filesystem::path existing_ancestor(const std::filesystem::path& path) {
    std::filesystem::path p = path.parent_path();
    std::error_code ec;
    while (!p.empty() && !std::filesystem::exists(p, ec)) p = p.parent_path();
    return p.empty() ? std::filesystem::path(".") : p;
}

}  // namespace

void flush_stdout() {
    if (std::fflush(stdout) != 0 || std::ferror(stdout))
        throw std::runtime_error(fmt::format("cannot write the standard output: {}", std::strerror(errno)));
}

size_t invalid_utf8_at(const std::string& text) {
    for (size_t i = 0; i < text.size();) {
        const auto lead = static_cast<unsigned char>(text[i]);
        // Continuation bytes after the lead byte, and the smallest code point of that length
        // (so an overlong form is invalid); surrogates and code points past U+10FFFF are too.
        const int more = lead < 0x80 ? 0 : (lead >> 5) == 0x6 ? 1 : (lead >> 4) == 0xe ? 2 : (lead >> 3) == 0x1e ? 3 : -1;
        if (more < 0 || text.size() - i <= static_cast<size_t>(more)) return i;
        uint32_t code = more == 0 ? lead : lead & (0x3f >> more);
        for (int k = 1; k <= more; ++k) {
            const auto c = static_cast<unsigned char>(text[i + static_cast<size_t>(k)]);
            if ((c >> 6) != 0x2) return i;
            code = (code << 6) | (c & 0x3f);
        }
        static constexpr uint32_t kSmallest[] = {0, 0x80, 0x800, 0x10000};
        if (code < kSmallest[more] || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff)) return i;
        i += static_cast<size_t>(more) + 1;
    }
    return std::string::npos;
}

std::string recordable_text(const std::string& text) {
    std::string out;
    size_t from = 0;
    for (size_t bad; (bad = invalid_utf8_at(text.substr(from))) != std::string::npos; from += bad + 1)
        out += text.substr(from, bad) + fmt::format("\\x{:02x}", static_cast<unsigned char>(text[from + bad]));
    return out + text.substr(from);
}

std::string printable(const std::string& text) {
    std::string out;
    for (const char c : recordable_text(text)) {
        const auto u = static_cast<unsigned char>(c);
        if (u < 0x20 || u == 0x7f)
            out += fmt::format("\\x{:02x}", u);
        else
            out += c;
    }
    return out;
}

std::string read_input_file(const std::string& path, const std::string& what, int64_t max_bytes) {
    auto fail = [&](const std::string& why) {
        return UserError(fmt::format("{}: cannot read {}: {}", printable(path), what, why));
    };
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) throw fail(std::strerror(errno));
    if (S_ISDIR(st.st_mode)) throw fail(std::strerror(EISDIR));
    if (!S_ISREG(st.st_mode)) throw fail(fmt::format("it is {}, not a regular file", kind_of(st.st_mode)));
    // O_NONBLOCK: should the path have become a FIFO since the stat, the open does not wait.
    const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) throw fail(std::strerror(errno));
    struct stat opened {};
    if (::fstat(fd, &opened) != 0 || !S_ISREG(opened.st_mode)) {
        ::close(fd);
        throw fail("it is not a regular file");
    }
    if (opened.st_size > max_bytes) {
        ::close(fd);
        throw fail(fmt::format("it is {} bytes, more than the {} bytes a {} may have", opened.st_size, max_bytes, what));
    }
    std::string text;
    char chunk[65536];
    for (;;) {
        const ssize_t n = ::read(fd, chunk, sizeof chunk);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            const int err = errno;
            ::close(fd);
            throw fail(std::strerror(err));
        }
        if (n == 0) break;
        text.append(chunk, static_cast<size_t>(n));
        if (static_cast<int64_t>(text.size()) > max_bytes) {  // it grew while being read
            ::close(fd);
            throw fail(fmt::format("it is more than the {} bytes a {} may have", max_bytes, what));
        }
    }
    ::close(fd);
    return text;
}

void note_input(const std::string& path, const std::string& what) {
    const std::string id = identity(path);
    std::lock_guard<std::mutex> lock(g_mutex);
    if (const auto it = g_outputs.find(id); it != g_outputs.end())
        throw UserError(fmt::format("{}: cannot read {}: it is the output {} of this run", printable(path), what,
                                    with_flag(it->second.flag, it->second.path)));
    g_inputs[id] = fmt::format("the {} {}", what, printable(path));
}

std::string read_text_file(const std::string& path, const std::string& what) {
    if (const size_t at = invalid_utf8_at(path); at != std::string::npos)
        throw UserError(fmt::format("{}: cannot read {}: the path is not UTF-8 text (byte 0x{:02x} at offset {}), "
                                    "which records, being JSON, cannot hold",
                                    printable(path), what, static_cast<unsigned char>(path[at]), at));
    const std::string file = input_path(path);  // configs/NAME.yaml from any folder: the shipped one
    note_input(file, what);
    return read_input_file(file, what, kMaxYamlBytes);
}

std::string repeated_file(const std::vector<std::string>& paths) {
    std::vector<std::string> ids;
    for (const std::string& p : paths) ids.push_back(identity(p));
    const auto [first, again] = first_repeat(ids);
    if (again == 0) return "";
    const std::string& a = paths[first - 1];
    const std::string& b = paths[again - 1];
    return fmt::format("{} is given twice (entries {} and {}{})", printable(b), first, again,
                       a == b ? "" : ", as " + printable(a));
}

namespace {

// The input or earlier output `path` would clash with, or "" (and `path` noted as an output).
std::string clash_problem(const std::string& path, const std::string& flag, OutputKind kind, const std::string& name) {
    const std::string id = identity(path);
    std::lock_guard<std::mutex> lock(g_mutex);
    if (const auto it = g_inputs.find(id); it != g_inputs.end())
        return fmt::format("{}: is {}; {}", name, it->second,
                           kind == OutputKind::whole_file ? "writing it would replace it"
                                                          : "results appended to it would break it");
    if (const auto it = g_outputs.find(id); it != g_outputs.end() && it->second.flag != flag &&
                                            (kind == OutputKind::whole_file || it->second.kind == OutputKind::whole_file))
        return fmt::format("{}: is also the output {}; two outputs cannot share one file", name,
                           with_flag(it->second.flag, it->second.path));
    g_outputs.emplace(id, CheckedOutput{flag, path, kind});
    return "";
}

// A full file system, found before any work: it has blocks (not /proc's kind) but none free,
// and the output has no room of its own (`room`: the bytes the file already holds that a write
// may use: an appended record the slack of its last block, a file written whole all its blocks).
std::string full_disk_problem(const struct statvfs& fs, int64_t room, const std::string& name) {
    const auto free_blocks = ::geteuid() == 0 ? fs.f_bfree : fs.f_bavail;  // root may write the reserved blocks
    if (fs.f_blocks == 0 || free_blocks > 0 || room > 0) return "";
    return fmt::format("{}: the file system it is on is full (no block free), so nothing could be written; "
                       "free some space or choose another place", name);
}

}  // namespace

std::string output_path_problem(const std::string& path, const std::string& flag, OutputKind kind) {
    if (path.empty()) return flag.empty() ? "the results file name is empty" : flag + ": the file name is empty";
    const std::string name = with_flag(flag, path);
    for (size_t i = 0; i < path.size(); ++i) {
        const auto u = static_cast<unsigned char>(path[i]);
        if (u < 0x20 || u == 0x7f)
            return fmt::format("{}: the path holds a control character (byte 0x{:02x} at offset {}); choose "
                               "another name", name, u, i);
    }
    if (const size_t at = invalid_utf8_at(path); at != std::string::npos)
        return fmt::format("{}: the path is not UTF-8 text (byte 0x{:02x} at offset {}), which records, being JSON, "
                           "cannot hold; choose another name", name, static_cast<unsigned char>(path[at]), at);
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0) {
        if (S_ISDIR(st.st_mode)) return fmt::format("{}: is a folder, not a results file", name);
        if (!S_ISREG(st.st_mode))
            return fmt::format("{}: is {}, not a regular file; results go to a regular file", name, kind_of(st.st_mode));
        if (std::string clash = clash_problem(path, flag, kind, name); !clash.empty()) return clash;
        const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_NONBLOCK | O_CLOEXEC);
        if (fd < 0) return fmt::format("{}: cannot open results file for appending: {}", name, std::strerror(errno));
        struct statvfs fs {};
        const bool known = ::fstatvfs(fd, &fs) == 0;
        ::close(fd);
        const int64_t held = static_cast<int64_t>(st.st_blocks) * 512;
        if (known) return full_disk_problem(fs, kind == OutputKind::whole_file ? held : held - st.st_size, name);
        return "";
    }
    if (errno != ENOENT) return fmt::format("{}: cannot open results file: {}", name, std::strerror(errno));
    if (std::string clash = clash_problem(path, flag, kind, name); !clash.empty()) return clash;
    const std::filesystem::path p(path);
    const std::filesystem::path folder = existing_ancestor(p);  // a folder: else the stat failed with ENOTDIR
    if (struct statvfs fs {}; ::statvfs(folder.c_str(), &fs) == 0)
        if (std::string full = full_disk_problem(fs, 0, name); !full.empty()) return full;
    if (folder != p.parent_path() && !p.parent_path().empty()) {
        // The folders are made at the first append; here only whether one can be, under a
        // name of this process's own (another run may be making the same folders now).
        const std::filesystem::path probe = folder / fmt::format(".scalebench-check-{}", ::getpid());
        if (::mkdir(probe.c_str(), 0700) != 0)
            return fmt::format("{}: cannot create folder in {}: {}", name, printable(folder.string()), std::strerror(errno));
        ::rmdir(probe.c_str());
        return "";
    }
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) return fmt::format("{}: cannot create results file: {}", name, std::strerror(errno));
    ::close(fd);
    ::unlink(path.c_str());
    return "";
}

int write_all_and_sync(int fd, const std::string& text, size_t& written) {
    written = 0;
    while (written < text.size()) {
        const ssize_t n = ::write(fd, text.data() + written, text.size() - written);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return n < 0 ? errno : ENOSPC;
        written += static_cast<size_t>(n);
    }
    if (::fsync(fd) != 0 && errno != EINVAL && errno != EROFS) return errno;  // EINVAL: no fsync on it
    return 0;
}

void write_whole_file(const std::string& path, const std::string& text) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NONBLOCK | O_CLOEXEC, 0644);
    if (fd < 0)
        throw std::runtime_error(fmt::format("{}: cannot write: {}", printable(path), std::strerror(errno)));
    struct stat st {};
    const bool regular = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);  // only a regular file is removed
    size_t written = 0;
    int err = write_all_and_sync(fd, text, written);
    if (::close(fd) != 0 && err == 0) err = errno;
    if (err == 0) return;
    if (regular) ::unlink(path.c_str());  // no partial file: a reader never takes half a report for the whole
    throw std::runtime_error(fmt::format("{}: cannot write ({} of {} bytes written): {}{}", printable(path), written,
                                         text.size(), std::strerror(err), regular ? "; the partial file is removed" : ""));
}

std::vector<std::filesystem::path> create_parent_folders(const std::filesystem::path& file) {
    std::vector<std::filesystem::path> missing;
    std::error_code ec;
    for (std::filesystem::path p = file.parent_path(); !p.empty() && !std::filesystem::exists(p, ec); p = p.parent_path())
        missing.insert(missing.begin(), p);
    std::vector<std::filesystem::path> made;
    for (const std::filesystem::path& p : missing) {
        if (::mkdir(p.c_str(), 0755) == 0) {
            made.push_back(p);
        } else if (errno != EEXIST) {  // EEXIST: another writer made it; it is theirs to keep
            const int err = errno;
            remove_folders(made);
            throw std::runtime_error(fmt::format("{}: cannot create folder: {}", printable(p.string()), std::strerror(err)));
        }
    }
    return made;
}

void remove_folders(const std::vector<std::filesystem::path>& made) {
    for (auto it = made.rbegin(); it != made.rend(); ++it) ::rmdir(it->c_str());  // fails, harmlessly, when not empty
}

}  // namespace sb
