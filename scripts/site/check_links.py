#!/usr/bin/env python3
"""check_links.py - every link of the built site works, and nothing it loads
comes from the network.

    python3 scripts/site/check_links.py build/site

For every page (*.html) under the site: each <a href>, <img src>,
<script src>, <link href> and <source src> that is relative must name a
file of the site (a folder: its index.html), and with #anchor an element
of that page with that id (/path: from the site's root); what a page loads (script, stylesheet, image,
icon, font) must not be an address of another machine; a stylesheet must
not load one with url() or @import either. Links to other sites (<a href=
"https://...">) are navigation, not loads: they are counted, not followed.
Prints one line per problem, then "pages N, links N, external N, broken N";
exits 1 if any is broken. Standard library only."""
import html.parser
import os
import re
import sys
import urllib.parse

REMOTE = re.compile(r'^(?:[a-z][a-z0-9+.-]*:)?//', re.I)
SCHEME = re.compile(r'^[a-z][a-z0-9+.-]*:', re.I)
CSS_REMOTE = re.compile(r'(?:url\(\s*[\'"]?|@import\s+[\'"])((?:https?:)?//[^\'")\s]+)', re.I)


class Page(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.ids = set()
        self.refs = []  # (kind, url): kind 'link' (navigation) or 'load'

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        for key in ('id', 'name') if tag == 'a' else ('id',):
            if a.get(key):
                self.ids.add(a[key])
        if tag == 'a' and a.get('href') is not None:
            self.refs.append(('link', a['href']))
        elif tag in ('img', 'script', 'source', 'iframe', 'audio', 'video') and a.get('src'):
            self.refs.append(('load', a['src']))
        elif tag == 'link' and a.get('href'):
            rel = (a.get('rel') or '').lower()
            # preconnect/dns-prefetch open connections as surely as a load.
            self.refs.append(('load' if rel != 'canonical' else 'link', a['href']))


def main():
    if len(sys.argv) != 2:
        print('usage: check_links.py SITE_DIR', file=sys.stderr)
        return 2
    site = os.path.abspath(sys.argv[1])
    if not os.path.isfile(os.path.join(site, 'index.html')):
        print(f'check_links.py: {sys.argv[1]}/index.html is missing: build the site first (make site)', file=sys.stderr)
        return 2
    pages = {}
    for d, _, files in os.walk(site):
        for f in files:
            if f.endswith('.html'):
                p = Page()
                path = os.path.join(d, f)
                with open(path, encoding='utf-8') as fh:
                    p.feed(fh.read())
                pages[path] = p
    bad = links = external = 0

    def report(page, what, ref):
        nonlocal bad
        bad += 1
        print(f'{os.path.relpath(page, site)}: {what} {ref}')

    for path, p in sorted(pages.items()):
        for kind, ref in p.refs:
            links += 1
            if REMOTE.match(ref) or (SCHEME.match(ref) and not ref.lower().startswith(('mailto:', 'data:'))):
                external += 1
                if kind == 'load':
                    report(path, 'loads from the network', ref)
                continue
            if SCHEME.match(ref):
                continue  # mailto:, data:
            url = urllib.parse.urlsplit(ref)
            target = path
            if url.path:
                # /x is the site's root (404.html's links, served from the root).
                base = site if url.path.startswith('/') else os.path.dirname(path)
                target = os.path.normpath(os.path.join(base, urllib.parse.unquote(url.path).lstrip('/')))
                if not (target + os.sep).startswith(site + os.sep):
                    report(path, 'points outside the site', ref)
                    continue
                if os.path.isdir(target):
                    target = os.path.join(target, 'index.html')
                if not os.path.isfile(target):
                    report(path, 'missing file', ref)
                    continue
            anchor = urllib.parse.unquote(url.fragment)
            if anchor and target.endswith('.html'):
                if target not in pages or anchor not in pages[target].ids:
                    report(path, 'missing anchor', ref)
    for d, _, files in os.walk(site):
        for f in files:
            if f.endswith('.css'):
                path = os.path.join(d, f)
                with open(path, encoding='utf-8', errors='replace') as fh:
                    for m in CSS_REMOTE.finditer(fh.read()):
                        report(path, 'loads from the network', m.group(1))
    print(f'pages {len(pages)}, links {links}, external {external}, broken {bad}')
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
