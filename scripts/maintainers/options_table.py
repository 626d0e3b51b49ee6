#!/usr/bin/env python3
"""options_table.py - every option of every program, as its -h prints it, in one table.

  scripts/maintainers/options_table.py           print the table (Markdown) from ./lesson* -h
  scripts/maintainers/options_table.py --check   exit 1 unless docs/options.md holds that table, and
                                     each option letter has one long name in every program
                                     (-n, a count, is the one letter whose long name says
                                     what is counted)

Run it at the top of the tree after `make`. Each row is one option as the
programs print it: letter, long name and argument, the words of the first
program's -h, and every program that takes it (with their own words when
they differ). The table sits in docs/options.md between the lines
<!-- options table --> and <!-- end of options table -->.
"""
import pathlib
import re
import subprocess
import sys

LINE = re.compile(r"^  (?:(-\w), |    )(--[\w-]+)(=\S+)?(?:\s+(.*))?$")
# Letters whose long name may differ between programs: -n counts iterations,
# requests, adds or datagrams, whichever the program repeats.
MANY_NAMES = {"-n"}
START, END = "<!-- options table -->", "<!-- end of options table -->"


def programs():
    found = [p for p in pathlib.Path(".").glob("lesson*") if p.is_file() and p.stat().st_mode & 0o111]
    def key(p):
        m = re.match(r"lesson(\d+)(.*)", p.name)
        return (int(m.group(1)), m.group(2))
    return sorted(found, key=key)


def options_of(prog):
    """(short, long, argument, words) for each option line of PROG -h; continuation lines joined."""
    text = subprocess.run([f"./{prog.name}", "-h"], capture_output=True, text=True, timeout=30).stdout
    opts, inside = [], False
    for line in text.splitlines():
        if line.startswith("Options:"):
            inside = True
            continue
        if not inside:
            continue
        if not line.strip():
            break
        m = LINE.match(line)
        if m:
            opts.append([m.group(1) or "", m.group(2), m.group(3) or "", (m.group(4) or "").strip()])
        elif opts and line.startswith("   "):
            opts[-1][3] = (opts[-1][3] + " " + line.strip()).strip()
        else:  # a line such as "  -i, -g   not taken: ...": no option of this program
            continue
    return [tuple(o) for o in opts]


def table():
    rows = {}  # (short, long, arg) -> {words: [programs]}
    for prog in programs():
        for short, long, arg, words in options_of(prog):
            rows.setdefault((short, long, arg), {}).setdefault(words, []).append(prog.name)
    def key(k):
        short, long, _ = k
        letter = short[1:] if short else long[2:]
        return (letter.lower(), letter.islower(), long)
    out = ["| option | what it does (the program's own -h) | programs |", "|---|---|---|"]
    for k in sorted(rows, key=key):
        short, long, arg = k
        name = f"`{short}, {long}{arg}`" if short else f"`{long}{arg}`"
        name = name.replace("|", "\\|")
        variants = rows[k]
        first = True
        for words, progs in variants.items():
            cell = words.replace("|", "\\|")
            out.append(f"| {name if first else ''} | {cell} | {', '.join(progs)} |")
            first = False
    return "\n".join(out) + "\n", rows


def check():
    text, rows = table()
    problems = []
    longs = {}
    for short, long, _ in rows:
        if short:
            longs.setdefault(short, set()).add(long)
    for short, names in sorted(longs.items()):
        if len(names) > 1 and short not in MANY_NAMES:
            problems.append(f"{short} has {len(names)} meanings: {', '.join(sorted(names))}")
    page = pathlib.Path("docs/options.md").read_text()
    if START not in page or END not in page:
        problems.append(f"docs/options.md has no {START} ... {END} section")
    else:
        held = page.split(START, 1)[1].split(END, 1)[0].strip("\n") + "\n"
        if held != text:
            problems.append("docs/options.md's table differs from the programs' -h: "
                            "run scripts/maintainers/options_table.py and paste its output between the markers")
    for p in problems:
        print(p)
    print(f"problems {len(problems)}")
    return 1 if problems else 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--check"]:
        sys.exit(check())
    if sys.argv[1:]:
        print(__doc__.strip().splitlines()[0], file=sys.stderr)
        sys.exit(2)
    sys.stdout.write(table()[0])
