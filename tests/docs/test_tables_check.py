#!/usr/bin/env python3
"""results/tables.py --check must fail on each thing it promises to catch.

    test_tables_check.py SOURCE_DIR

On a scratch copy of README.md, docs/ and results/: the committed state passes; then, one at a time, a
figure edited by hand, a marker naming no table, a record file removed and a results folder without its
README.md must each make --check exit 1 and name the problem; and regenerating repairs the edited figure.
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile


def scratch(source):
    work = tempfile.mkdtemp(prefix="scalebench-tables-")
    shutil.copytree(os.path.join(source, "results"), os.path.join(work, "results"))
    shutil.copytree(os.path.join(source, "docs"), os.path.join(work, "docs"))
    shutil.copy(os.path.join(source, "README.md"), work)
    return work


def check(work, *extra):
    done = subprocess.run([sys.executable, os.path.join(work, "results", "tables.py"), *extra],
                          capture_output=True, text=True)
    return done.returncode, done.stderr


def first_linked_figure(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"\[([0-9][0-9,.]*)\]\((results/[^)#]+)", text)
    if not m:
        raise SystemExit(f"no generated figure found in {path}")
    return text, m


def main():
    source = os.path.abspath(sys.argv[1])
    failures = []

    def expect(name, work, code, mentions=None):
        got, err = check(work, "--check")
        if got != code or (mentions and mentions not in err):
            failures.append(f"{name}: --check exited {got} (expected {code}), stderr: {err.strip()!r}")
        shutil.rmtree(work, ignore_errors=True)

    expect("the committed state", scratch(source), 0)

    work = scratch(source)
    readme = os.path.join(work, "README.md")
    text, m = first_linked_figure(readme)
    with open(readme, "w", encoding="utf-8") as f:
        f.write(text[:m.start(1)] + "9" + text[m.start(1):])
    got, err = check(work, "--check")
    if got != 1 or "differs from its records" not in err:
        failures.append(f"an edited figure: --check exited {got}, stderr: {err.strip()!r}")
    check(work)  # regenerate
    expect("the edited figure, regenerated", work, 0)

    work = scratch(source)
    with open(os.path.join(work, "README.md"), "a", encoding="utf-8") as f:
        f.write("\n<!-- table:no_such_table -->\n<!-- /table -->\n")
    expect("an unknown table", work, 1, "unknown table 'no_such_table'")

    work = scratch(source)
    _, m = first_linked_figure(os.path.join(work, "README.md"))
    os.remove(os.path.join(work, m.group(2)))
    expect("a missing record", work, 1, f"{m.group(2)} does not exist")

    work = scratch(source)
    folder = os.path.dirname(m.group(2))  # the record's folder: the nearest one with its README.md
    while not os.path.isfile(os.path.join(work, folder, "README.md")):
        folder = os.path.dirname(folder)
    os.remove(os.path.join(work, folder, "README.md"))
    expect("a folder without its README.md", work, 1, f"{folder}/: records without a README.md")

    for f in failures:
        print(f"FAILED {f}")
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
