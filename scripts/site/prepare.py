#!/usr/bin/env python3
"""prepare.py - lay out the pages of the site that `make site` builds
(scripts/site/build.sh), and write its mkdocs.yml with the contents in reading order.

    python3 scripts/site/prepare.py OUT

run from the checkout's top. OUT (build/site-src) gets:
- pages/: the repository's own layout, so that every relative link of the
  Markdown works unchanged: README.md (mkdocs makes it index.html), docs/
  whole (pages, img/, captures/, the Wireshark profile), and every other
  file of the repository that one of those pages links to, found by
  following the links (the exercises' README.md pages, common/README.md, a
  lesson's source file): pages become pages, other files downloads.
  A link to a folder (README's `docs/`) is pointed at that folder's
  README.md, or at a generated index.md listing its pages.
- mkdocs.yml: scripts/site/mkdocs.yml with `nav:` appended. The contents
  are made from what is there: README (the introduction), concepts, then
  the lessons in number order (README's table names them; a page
  docs/lessonN-*.md not yet in the table is added by its number, with its
  own heading; a row whose page is missing is left out and reported), then
  the lab, Soft-RoCE, Wireshark, the rxe facts page, then every other page
  of docs/.
Nothing here fails on a missing page: it says so on stderr and goes on."""
import os
import re
import shutil
import sys

LINK = re.compile(r'\]\(([^)\s]+)(?:\s+"[^"]*")?\)')
# README's lesson table: | N | name | run it | what you learn | [lessonN](docs/lessonN-x.md) |
ROW = re.compile(r'^\|\s*(\d+)\s*\|\s*([^|]+?)\s*\|.*\]\((docs/lesson\d+-[^)#]+\.md)\)\s*\|\s*$')
LESSON_PAGE = re.compile(r'^lesson(\d+)-.*\.md$')
# After the lessons, in this order; then the rest of docs/ by name.
AFTER = ['docs/lab.md', 'docs/soft-roce.md', 'docs/wireshark.md', 'docs/rxe.md', 'docs/lab-internals.md']
FIRST = ['README.md', 'docs/concepts.md']


def say(msg):
    print(f'prepare.py: {msg}', file=sys.stderr)


def heading(path):
    """The page's first level-1 heading, or its file name."""
    try:
        with open(path, encoding='utf-8') as f:
            for line in f:
                if line.startswith('# '):
                    return line[2:].strip()
    except OSError:
        pass
    return os.path.basename(path)


def targets(md):
    """The relative link targets of a Markdown file (outside code)."""
    out, incode = [], False
    with open(md, encoding='utf-8') as f:
        for line in f:
            if line.lstrip().startswith('```'):
                incode = not incode
                continue
            if incode:
                continue
            for m in LINK.finditer(re.sub(r'`[^`]*`', '', line)):
                t = m.group(1)
                if re.match(r'^[a-z][a-z0-9+.-]*:', t) or t.startswith('#'):
                    continue
                out.append(t.split('#', 1)[0])
    return out


def lay_out(pages):
    """Copy README.md, docs/ and every repository file they link to (and what
    those link to) into pages/, at the same paths."""
    shutil.copy2('README.md', os.path.join(pages, 'README.md'))
    shutil.copytree('docs', os.path.join(pages, 'docs'))
    todo = ['README.md'] + sorted(
        os.path.join(d, f) for d, _, fs in os.walk('docs') for f in fs if f.endswith('.md'))
    seen = set(todo)
    folders = {}  # folder -> the page a link to it lands on
    while todo:
        md = todo.pop(0)
        for t in targets(md):
            target = os.path.normpath(os.path.join(os.path.dirname(md), t))
            if target.startswith('..') or os.path.isabs(target):
                continue
            if os.path.isdir(target):
                folders.setdefault(target, None)
                continue
            if not os.path.isfile(target) or target in seen:
                continue  # the link checker reports a link to nothing
            seen.add(target)
            dest = os.path.join(pages, target)
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            shutil.copy2(target, dest)
            if target.endswith('.md'):
                todo.append(target)
    return folders


def folder_pages(pages, folders, nav_pages):
    """Point links to a folder at a page: its README.md if it has one, else a
    generated index.md that lists its pages (in contents order)."""
    for folder in sorted(folders):
        if os.path.isfile(os.path.join(folder, 'README.md')):
            land = os.path.join(folder, 'README.md')
            dest = os.path.join(pages, land)
            if not os.path.exists(dest):
                os.makedirs(os.path.dirname(dest), exist_ok=True)
                shutil.copy2(land, dest)
        else:
            land = os.path.join(folder, 'index.md')
            listed = [p for _, p in nav_pages if os.path.dirname(p) == folder]
            listed += sorted(os.path.join(folder, f) for f in os.listdir(folder)
                             if f.endswith('.md') and os.path.join(folder, f) not in listed)
            with open(os.path.join(pages, land), 'w', encoding='utf-8') as f:
                f.write(f'# The pages of {folder}/\n\n')
                for p in listed:
                    f.write(f'- [{heading(p)}]({os.path.basename(p)})\n')
        folders[folder] = land
    # Rewrite the folder links of the copied pages (the sources are untouched).
    for d, _, fs in os.walk(pages):
        for name in fs:
            if not name.endswith('.md'):
                continue
            path = os.path.join(d, name)
            src_dir = os.path.dirname(os.path.relpath(path, pages))
            with open(path, encoding='utf-8') as f:
                text = f.read()

            def fix(m):
                t = m.group(1)
                path_part, sep, anchor = t.partition('#')
                if re.match(r'^[a-z][a-z0-9+.-]*:', t) or not path_part:
                    return m.group(0)
                target = os.path.normpath(os.path.join(src_dir, path_part))
                if target not in folders:
                    return m.group(0)
                new = os.path.relpath(folders[target], src_dir or '.')
                return m.group(0).replace(t, new + sep + anchor, 1)
            new_text = LINK.sub(fix, text)
            if new_text != text:
                with open(path, 'w', encoding='utf-8') as f:
                    f.write(new_text)


def contents():
    """The contents in reading order: (title, page) pairs of pages that exist."""
    nav = [('Introduction', 'README.md')]
    if os.path.isfile('docs/concepts.md'):
        nav.append(('Concepts', 'docs/concepts.md'))
    lessons = {}
    with open('README.md', encoding='utf-8') as f:
        for line in f:
            m = ROW.match(line.rstrip('\n'))
            if not m:
                continue
            n, name, page = int(m.group(1)), m.group(2), m.group(3)
            if os.path.isfile(page):
                lessons[n] = (f'Lesson {n}: {name}', page)
            else:
                say(f"README's row for lesson {n} names {page}, which is not there: left out of the contents")
    for name in sorted(os.listdir('docs')):
        m = LESSON_PAGE.match(name)
        if not m or int(m.group(1)) in lessons:
            continue
        n, page = int(m.group(1)), f'docs/{name}'
        title = re.sub(r'^Lesson\s+\d+\s*[:.-]\s*', '', heading(page))
        lessons[n] = (f'Lesson {n}: {title}', page)
        say(f"{page} is not in README's table yet: in the contents as lesson {n}")
    nav += [lessons[n] for n in sorted(lessons)]
    placed = {p for _, p in nav}
    for page in AFTER:
        if os.path.isfile(page):
            nav.append((heading(page).split(':')[0], page))
            placed.add(page)
    for name in sorted(os.listdir('docs')):
        page = f'docs/{name}'
        if name.endswith('.md') and page not in placed:
            nav.append((heading(page).split(':')[0], page))
    return nav


def yaml_str(s):
    return '"' + s.replace('\\', '\\\\').replace('"', '\\"') + '"'


def main():
    if len(sys.argv) != 2:
        print('usage: prepare.py OUT', file=sys.stderr)
        return 2
    out = sys.argv[1]
    pages = os.path.join(out, 'pages')
    if os.path.isdir(out):
        shutil.rmtree(out)
    os.makedirs(pages)
    nav = contents()
    folders = lay_out(pages)
    folder_pages(pages, folders, nav)
    with open(os.path.join(os.path.dirname(__file__), 'mkdocs.yml'), encoding='utf-8') as f:
        config = f.read()
    with open(os.path.join(out, 'mkdocs.yml'), 'w', encoding='utf-8') as f:
        f.write(config.rstrip('\n') + '\n\n# Made by scripts/site/prepare.py from README.md and docs/.\nnav:\n')
        for title, page in nav:
            f.write(f'  - {yaml_str(title)}: {yaml_str(page)}\n')
    return 0


if __name__ == '__main__':
    sys.exit(main())
