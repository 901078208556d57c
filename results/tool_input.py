"""The checked reading of an input file by the results/ tools (plot_scaling.py, compare_report.py),
as scalebench's own readers do (src/core/files.h): a path that is not a regular file (a FIFO,
/dev/zero, a folder) is refused from its stat and never opened for a blocking read, and a file past
its bound is refused before it is read, so a tool never blocks forever or runs out of memory.
Also the tools' one reading of a record's numbers in their ranges (RANGES, the ranges
`scalebench report` shows them in: src/commands/report.cpp) and one escaping of Markdown table
text (src/core/table_text.h's rule).
"""

import json
import math
import os
import stat


class InputError(Exception):
    """Bad input: the tool prints it as one line and exits 2."""


def read_input(path, what, max_bytes):
    """The bytes of `path`, or InputError naming it: missing, not a regular file, or over max_bytes."""
    try:
        st = os.stat(path)
    except OSError as e:
        raise InputError(f"{path}: cannot read {what}: {e.strerror}")
    if not stat.S_ISREG(st.st_mode):
        kind = "a folder" if stat.S_ISDIR(st.st_mode) else "a FIFO" if stat.S_ISFIFO(st.st_mode) else \
            "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else "not a regular file"
        raise InputError(f"{path}: cannot read {what}: it is {kind}, not a regular file")
    if st.st_size > max_bytes:
        raise InputError(f"{path}: cannot read {what}: it is {st.st_size} bytes, more than the {max_bytes} a {what} may have")
    try:
        # O_NONBLOCK: should the path have become a FIFO since the stat, the open does not wait.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as f:
            data = f.read(max_bytes + 1)
    except OSError as e:
        raise InputError(f"{path}: cannot read {what}: {e.strerror or e}")
    if len(data) > max_bytes:
        raise InputError(f"{path}: cannot read {what}: it is more than the {max_bytes} bytes a {what} may have")
    return data


# The range of each record number a tool reads (as `scalebench report` checks them): a 300-digit
# time or a negative throughput is bad input, never drawn.
RANGES = {"samples_per_s": (0, 1e15), "scaling_efficiency": (0, 100), "step_ms": (0, 1e9),
          "compute_ms": (0, 1e9), "exposed_comm_ms": (0, 1e9), "optimizer_ms": (0, 1e9),
          "size_bytes": (0, 2 ** 50), "busbw_gbps": (0, 1e6), "no_comm_step_ms": (0, 1e9),
          "samples_per_s_spread": (0, 1e15), "scaling_efficiency_spread": (0, 100)}


def number(record, key, where, field=None):
    """record[key], a finite number inside the range of `field` (default: key) in RANGES."""
    value = record.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InputError(f"{where}: field '{key}' is {json.dumps(value)[:40]}, expected a number")
    lo, hi = RANGES.get(field or key, (-math.inf, math.inf))
    if not lo <= value <= hi:
        raise InputError(f"{where}: field '{key}' is {value:g}, expected a number from {lo:g} to {hi:g}")
    return float(value)


def optional_number(record, key, where):
    """record[key] where the record has it (records before spreads and no-communication steps
    have none): None, or a number as number() checks it."""
    return None if record.get(key) is None else number(record, key, where)


def markdown_cell(text):
    """Text that cannot break a Markdown table: `|` written \\|, control characters as \\xNN."""
    out = []
    for c in str(text):
        if c == "|":
            out.append("\\|")
        elif ord(c) < 0x20 or ord(c) == 0x7F:
            out.append(f"\\x{ord(c):02x}")
        else:
            out.append(c)
    return "".join(out)
