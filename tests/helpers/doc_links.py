#!/usr/bin/env python3
"""doc_links.py - every link between the pages (README.md and docs/*.md) must
name a page that exists and, with #anchor, a heading of that page (GitHub's
slug: lower case, punctuation dropped, spaces as '-', a repeated heading -1,
-2). Links into lessons/, common/ and elsewhere are not checked here.
Prints one line per broken link, then "broken N"; exits 1 if N > 0.
Run from the checkout's top: python3 tests/helpers/doc_links.py"""
import re,os,sys,glob
def slug(h):
    h=h.strip().lower()
    h=re.sub(r'[^\w\- ]','',h)  # drop punctuation except - and space, keep _
    return h.replace(' ','-')
files=['README.md']+glob.glob('docs/*.md')
anchors={}
for f in files:
    a=set(); seen={}
    incode=False
    for line in open(f):
        if line.startswith('```'): incode=not incode
        if incode: continue
        m=re.match(r'^(#+)\s+(.*)',line)
        if m:
            s=slug(m.group(2).replace('`',''))
            if s in seen: seen[s]+=1; s=f"{s}-{seen[s]}"
            else: seen[s]=0
            a.add(s)
    anchors[os.path.normpath(f)]=a
bad = 0
for f in files:
    txt=open(f).read()
    for m in re.finditer(r'\]\(([^)\s]+)\)',txt):
        t=m.group(1)
        if t.startswith('http'): continue
        path,_,anc=t.partition('#')
        target=os.path.normpath(os.path.join(os.path.dirname(f),path)) if path else os.path.normpath(f)
        if target != 'README.md' and not target.startswith('docs/'): continue
        if target.endswith('.md') and target not in anchors:
            print(f"{f}: missing page {t}"); bad+=1; continue
        if not os.path.exists(target):
            print(f"{f}: missing file {t}"); bad+=1; continue
        if anc and target.endswith('.md') and anc not in anchors.get(target,set()):
            print(f"{f}: missing anchor {t}"); bad+=1
print("broken", bad)
sys.exit(1 if bad else 0)
