#!/usr/bin/env python3
"""Runs every ```bash block of README.md and docs/*.md against the built binary, on CPU ranks.

    run_doc_commands.py --binary build/scalebench --source . [FILE.md ...]

A block is skipped when the line above its fence is `<!-- gpu -->` (it needs a GPU) or
`<!-- skip-test: REASON -->`; a block under `<!-- exit N -->` must exit N (its last command's code, e.g.
bad input's 2); every other ```bash block must exit 0. The blocks of one file run in order
in one scratch folder that looks like a checkout: `build/scalebench` is the binary under test,
`configs/`, `launch/` and `tests/` link to the source, `results/`, `docs/` and README.md are copies (so
the commands can read the committed records and write their own without touching the source), and `/tmp/` in a command is
rewritten to the scratch folder's `tmp/`. `mpirun` is given `--allow-run-as-root --oversubscribe`, as a
reader running as root on a small machine would add. Blocks that plot are skipped (and said so) where
/usr/bin/python3 has no matplotlib. Exit 1 names every block that failed, with its file:line and output.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

FENCE = re.compile(r"^```(bash|sh)\s*$")
SKIP = re.compile(r"^<!-- (gpu|skip-test: .+) -->$")
EXPECT = re.compile(r"^<!-- exit (\d+) -->$")
PRELUDE = """set -eo pipefail
mpirun() { command mpirun --allow-run-as-root --oversubscribe --bind-to none "$@"; }
export -f mpirun
"""


def blocks(path):
    """(line of the fence, text, skip reason or None, expected exit code) for every ```bash block."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    found, i = [], 0
    while i < len(lines):
        if FENCE.match(lines[i]):
            start = i + 1
            above = next((lines[j].strip() for j in range(i - 1, -1, -1) if lines[j].strip()), "")
            skip, expect = SKIP.match(above), EXPECT.match(above)
            i += 1
            body = []
            while i < len(lines) and lines[i].strip() != "```":
                body.append(lines[i])
                i += 1
            found.append((start, "\n".join(body), skip.group(1) if skip else None, int(expect.group(1)) if expect else 0))
        i += 1
    return found


def scratch_checkout(binary, source):
    work = tempfile.mkdtemp(prefix="scalebench-docs-")
    os.makedirs(os.path.join(work, "build"))
    os.symlink(os.path.abspath(binary), os.path.join(work, "build", "scalebench"))
    for name in ("configs", "launch", "tests"):
        os.symlink(os.path.join(source, name), os.path.join(work, name))
    shutil.copytree(os.path.join(source, "results"), os.path.join(work, "results"))
    shutil.copytree(os.path.join(source, "docs"), os.path.join(work, "docs"))
    shutil.copy(os.path.join(source, "README.md"), work)
    os.makedirs(os.path.join(work, "tmp"))
    return work


def has_matplotlib():
    try:
        return subprocess.run(["/usr/bin/python3", "-c", "import matplotlib"], capture_output=True).returncode == 0
    except OSError:
        return False


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--binary", required=True)
    parser.add_argument("--source", required=True)
    parser.add_argument("--timeout", type=int, default=300, help="seconds per block")
    parser.add_argument("files", nargs="*")
    args = parser.parse_args()
    source = os.path.abspath(args.source)
    files = args.files or [os.path.join(source, "README.md")] + sorted(
        os.path.join(source, "docs", f) for f in os.listdir(os.path.join(source, "docs")) if f.endswith(".md"))
    plots = has_matplotlib()
    failures, ran = [], 0
    for path in files:
        rel = os.path.relpath(path, source)
        work = scratch_checkout(args.binary, source)
        try:
            for line, text, skip, expected in blocks(path):
                where = f"{rel}:{line}"
                if skip:
                    print(f"skipped  {where} ({skip})")
                    continue
                if "plot_scaling.py" in text and not plots:
                    print(f"SKIPPED  {where}: /usr/bin/python3 cannot import matplotlib")
                    continue
                script = PRELUDE + text.replace("/tmp/", os.path.join(work, "tmp") + "/")
                start = time.monotonic()
                try:
                    done = subprocess.run(["bash", "-c", script], cwd=work, capture_output=True, text=True,
                                          timeout=args.timeout)
                    code, output = done.returncode, done.stdout + done.stderr
                except subprocess.TimeoutExpired as e:
                    code, output = "timeout", f"did not finish within {args.timeout} s\n{e.stdout or ''}{e.stderr or ''}"
                ran += 1
                took = f" {time.monotonic() - start:.1f} s"  # the slow blocks are CI's time
                if code == expected:
                    print(f"ok       {where}{took}" + (f" (exit {code}, as marked)" if expected else ""))
                else:
                    print(f"FAILED   {where} (exit {code}, expected {expected})")
                    failures.append((where, text, output))
        finally:
            shutil.rmtree(work, ignore_errors=True)
    for where, text, output in failures:
        print(f"\n=== {where} failed:\n{text}\n--- output (last 40 lines):", file=sys.stderr)
        print("\n".join(output.splitlines()[-40:]), file=sys.stderr)
    print(f"{ran} block(s) run, {len(failures)} failed")
    return 1 if failures or ran == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
