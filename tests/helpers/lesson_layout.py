#!/usr/bin/env python3
"""lesson_layout.py - does each lesson stand alone? (tests/lesson_layout.bats)

  lesson_layout.py verbs [ROOT]    every ibv_*/rdma_* name that a lesson file's header lists under
                                   "Verbs it introduces" appears in code (not in a comment or a
                                   string) in some file of that lesson's folder; the release verbs
                                   that common/handles.hpp's deleters call are the one exception
  lesson_layout.py common [ROOT]   every common/ file is used by the programs of two or more
                                   lessons (through #include, directly or through another common/
                                   header)

Prints one line per finding and a last line "findings N"; exits 1 when N > 0.
The lessons are lessons/NN_topic/; a lesson's programs are its lesson*.cpp; its
folder's code is every .cpp and .hpp in it, exercises/ left out.
"""
import pathlib
import re
import sys

NAME = re.compile(r"\b(?:ibv|rdma)_[a-z0-9_]+\b")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def strip_comments_and_strings(text):
    """The code of a C++ file with its comments, string and character literals blanked."""
    token = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)
    return token.sub(lambda m: "\n" * m.group(0).count("\n"), text)


def lessons(root):
    return sorted(d for d in (root / "lessons").glob("[0-9][0-9]_*") if d.is_dir())


def lesson_files(folder):
    return sorted(p for p in folder.iterdir() if p.suffix in (".cpp", ".hpp") and p.is_file())


def introduced(text):
    """The names listed in the header's "Verbs it introduces" block: that line and the
    indented comment lines below it (a line that is not "//" and two spaces ends it:
    an empty comment line, a new heading such as "// Verbs from earlier lessons", code)."""
    names, inside = [], False
    for line in text.splitlines():
        if not inside:
            inside = line.startswith("//") and "Verbs it introduces" in line
            if inside:
                names += NAME.findall(line.split("Verbs it introduces", 1)[1])
            continue
        if not line.startswith("//  "):
            break
        names += NAME.findall(line)
    return list(dict.fromkeys(names))


def release_verbs(root):
    code = ""
    for p in (root / "common").glob("handles.*"):
        code += strip_comments_and_strings(p.read_text())
    return {n for n in NAME.findall(code) if re.search(r"(destroy|dealloc|dereg|close|free|leave)", n)}


def cmd_verbs(root):
    findings = []
    released = release_verbs(root)
    for folder in lessons(root):
        files = lesson_files(folder)
        code = "".join(strip_comments_and_strings(p.read_text()) for p in files)
        used = set(NAME.findall(code))
        for prog in files:
            if not prog.name.startswith("lesson") or prog.suffix != ".cpp":
                continue
            for name in introduced(prog.read_text()):
                if name not in used and name not in released:
                    findings.append(f"{folder.name}: {prog.name} lists {name} under \"Verbs it introduces\", "
                                    f"but no file of {folder.name}/ calls it")
    return findings


def cmd_common(root):
    common = root / "common"
    headers = {p.name for p in common.glob("*.hpp")}
    # What each common header brings in: itself and the common headers it includes, transitively.
    direct = {h: set(INCLUDE.findall((common / h).read_text())) & headers for h in headers}
    for h in headers:  # a header's .cpp is part of it: what the .cpp includes is used with it
        cpp = common / (h[:-4] + ".cpp")
        if cpp.exists():
            direct[h] |= (set(INCLUDE.findall(cpp.read_text())) & headers) - {h}

    def closure(names):
        seen, todo = set(), list(names)
        while todo:
            n = todo.pop()
            if n in seen:
                continue
            seen.add(n)
            todo += direct.get(n, ())
        return seen

    users = {h: set() for h in headers}
    for folder in lessons(root):
        included = set()
        for p in lesson_files(folder):
            included |= set(INCLUDE.findall(p.read_text())) & headers
        for h in closure(included):
            users[h].add(folder.name)
    findings = []
    for h in sorted(headers):
        if len(users[h]) < 2:
            who = ", ".join(sorted(users[h])) or "no lesson"
            findings.append(f"common/{h[:-4]}.*: used by the programs of {who} only: "
                            f"code one lesson uses belongs in that lesson's folder")
    return findings


def main(argv):
    if len(argv) not in (2, 3) or argv[1] not in ("verbs", "common"):
        print(__doc__.strip().splitlines()[0], file=sys.stderr)
        return 2
    root = pathlib.Path(argv[2] if len(argv) == 3 else ".")
    findings = cmd_verbs(root) if argv[1] == "verbs" else cmd_common(root)
    for f in findings:
        print(f)
    print(f"findings {len(findings)}")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
