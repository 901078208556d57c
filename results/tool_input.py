"""The checked reading of an input file by the results/ tools (plot_scaling.py, compare_report.py),
as scalebench's own readers do (src/core/files.h): a path that is not a regular file (a FIFO,
/dev/zero, a folder) is refused from its stat and never opened for a blocking read, and a file past
its bound is refused before it is read, so a tool never blocks forever or runs out of memory.
Also the tools' one reading of a record's numbers in their ranges (RANGES, from
record_ranges.json beside this file: the table `scalebench report` is built with), one refusal of a
list naming one thing twice (scalebench's rule: src/core/choices.h) and one escaping of Markdown
table text (src/core/table_text.h's rule).
"""

import json
import math
import os
import stat
import sys


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


def file_identity(path):
    """What makes two paths one file: (device, inode), so another spelling or a link is the same
    file; the path itself when it cannot be stat'ed (its reader then says why)."""
    try:
        st = os.stat(path)
    except OSError:
        return path
    return st.st_dev, st.st_ino


def refuse_repeats(what, entries, identity=lambda entry: entry):
    """InputError "WHAT: X is given twice (entries I and J)" when `entries` names one thing twice,
    as scalebench refuses every list it is given; identity(entry) is what makes two entries one."""
    first = {}
    for i, entry in enumerate(entries, 1):
        key = identity(entry)
        if key in first:
            earlier = entries[first[key] - 1]
            spelled = "" if earlier == entry else f", as {earlier}"
            raise InputError(f"{what}: {entry} is given twice (entries {first[key]} and {i}{spelled})")
        first[key] = i


def _record_ranges():
    """{field: {"min", "max", "whole", "why"}} from record_ranges.json beside this file (shipped with
    the tools, in the checkout and installed): a missing or broken table is an install fault, exit 1."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "record_ranges.json")
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)["ranges"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        sys.exit(f"{path}: cannot read the record ranges the tools check numbers against: {e}")


# The range of each record number a tool reads (as `scalebench report` checks them): a 300-digit
# time, a negative throughput or a fractional world size is bad input, never drawn.
RANGES = _record_ranges()


def _shown(value):
    """A number as a message shows it: an integer whole (10**30 in full), a real as %g."""
    return str(value) if isinstance(value, int) else f"{value:g}"


def number(record, key, where, field=None):
    """record[key], a finite number inside the range of `field` (default: key) in RANGES, whole
    where the range says so (then an int)."""
    return checked(record.get(key), key, where, field or key)


def checked(value, key, where, field):
    """`value` (shown as field 'KEY' of WHERE) a finite number inside the range of `field` in RANGES."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            (isinstance(value, float) and not math.isfinite(value)):
        raise InputError(f"{where}: field '{key}' is {json.dumps(value)[:40]}, expected a number")
    r = RANGES[field]
    kind = "a whole number" if r.get("whole") else "a number"
    if r.get("whole") and value != int(value):
        raise InputError(f"{where}: field '{key}' is {_shown(value)}, expected {kind}")
    if not r["min"] <= value <= r["max"]:
        raise InputError(f"{where}: field '{key}' is {_shown(value)}, expected {kind} from {_shown(r['min'])} "
                         f"to {_shown(r['max'])} ({r['why']})")
    return int(value) if r.get("whole") else float(value)


def figures(node, fields, where, skip=(), field=None):
    """Every number of a JSON document that a tool prints or draws, checked where it stands: a
    value under a key that `fields` names ({key or parent.key: field of RANGES}; a list or dict
    under it passes the field on to what it holds) must be a number in that field's range; a number that
    is not finite (JSON's NaN, Infinity, or 1e999 read as inf) is refused wherever it stands. Keys
    in `skip` are not walked; `field`, when given, holds every number no key names (text and
    true/false beside them are left alone). InputError names the first bad figure by its path
    (profiles[1].card.price_usd)."""
    def walk(n, path, parent, field, named):
        if isinstance(n, dict):
            for k, v in n.items():
                if k in skip:
                    continue
                f = fields.get(f"{parent}.{k}", fields.get(k))
                walk(v, f"{path}.{k}" if path else str(k), k, f or field, named or f is not None)
        elif isinstance(n, list):
            for i, v in enumerate(n):
                walk(v, f"{path}[{i}]", parent, field, named)
        elif field is not None and (named or (isinstance(n, (int, float)) and not isinstance(n, bool))):
            checked(n, path, where, field)  # under a named key a figure must be a number: not true, "12" or null
        elif isinstance(n, float) and not math.isfinite(n):
            raise InputError(f"{where}: field '{path}' is {n}, expected a finite number")
    walk(node, "", "", field, False)


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


def drawn_text(text):
    """Text from an input as a plot draws it: a `$` escaped, so it is text, never matplotlib's
    math; a leading `_` kept (matplotlib leaves a label starting with one out of the legend)."""
    text = str(text).replace("$", r"\$")
    return "\u200b" + text if text.startswith("_") else text


def quiet_matplotlib():
    """matplotlib (Agg) for a tool's plots, without the warnings its drawing of our text raises:
    a glyph the font lacks (a name in another script) is drawn as a box, not a line on stderr."""
    import logging
    import warnings
    import matplotlib
    matplotlib.use("Agg")
    warnings.filterwarnings("ignore", message=r"Glyph .* missing from (current )?font")
    logging.getLogger("matplotlib.mathtext").setLevel(logging.ERROR)
    logging.getLogger("matplotlib.font_manager").setLevel(logging.ERROR)
    import matplotlib.pyplot as plt
    return plt
