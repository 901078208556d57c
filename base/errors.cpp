// Formatting of library-call failures: "[rank R on HOST] LIB call failed at file:line: call: message".
#include "base/errors.h"

#include <mpi.h>

#include <fmt/format.h>

#include "base/process.h"

namespace sb {

void throw_call_error(const char* library, const char* call, const std::string& message, const char* file,
                      int line) {
    const ProcessInfo& p = process_info();
    throw std::runtime_error(fmt::format("[rank {} on {}] {} call failed at {}:{}: {}: {}", p.world_rank,
                                         p.host.empty() ? "?" : p.host, library, file, line, call, message));
}

std::string mpi_error_string(int code) {
    char text[MPI_MAX_ERROR_STRING];
    int length = 0;
    if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return fmt::format("MPI error {}", code);
    return std::string(text, static_cast<size_t>(length));
}

}  // namespace sb
