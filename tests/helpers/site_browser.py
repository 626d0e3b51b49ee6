#!/usr/bin/python3
"""site_browser.py - open the built site in headless Chromium, as a reader
would, and say what it showed; record every request the browser makes.

    /usr/bin/python3 tests/helpers/site_browser.py SITE_DIR [--screenshots DIR]

(Debian's python3, whose python3-selenium drives Debian's chromium through
chromium-driver.) It serves SITE_DIR on 127.0.0.1 and starts Chromium with
every address that is not this machine's loopback sent to a recording proxy
on 127.0.0.1 that answers nothing: a request that would leave the machine
is caught there, whichever page, worker or part of the browser makes it.
Then it opens the home page and every page of the contents that has a
Mermaid diagram, waits for each to be drawn, and searches for "RNR" in the search box.
Prints, one fact a line, for tests/site.bats to assert on:

    contents: TITLE | TITLE | ...          the left-hand contents, in order
    page PATH: diagrams N svg N error N source-shown N
    diagram PATH: KIND ...                 each drawing's aria-roledescription
    search RNR: PATH PATH ...              the pages the results link to, in order, once each
    served N                               requests the site's server answered
    outside N                              requests that would have left the machine
    outside: METHOD URL                    each of them
    screenshot FILE                        with --screenshots DIR
Exits 0 when it got through (the facts say whether they are right), 1 if
the browser could not be driven."""
import http.server
import json
import os
import shutil
import socketserver
import sys
import tempfile
import threading
import time
import urllib.parse

from selenium import webdriver
from selenium.common.exceptions import TimeoutException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

WAIT = 20  # seconds for any one thing to appear


class Proxy(socketserver.ThreadingTCPServer):
    """A proxy that forwards nothing: it writes down each request's first
    line (CONNECT host:443 for https, GET http://... for http) and refuses."""
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self):
        self.seen = []
        super().__init__(('127.0.0.1', 0), ProxyHandler)


class ProxyHandler(socketserver.StreamRequestHandler):
    def handle(self):
        line = self.rfile.readline(4096).decode('latin-1').strip()
        if line:
            parts = line.split()
            self.server.seen.append(' '.join(parts[:2]))
        self.wfile.write(b'HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n')


def serve(site):
    served = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a, **kw):
            super().__init__(*a, directory=site, **kw)

        def log_message(self, *args):
            served.append(self.path)

    server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, served


def browser(proxy_port, profile):
    # A new profile whose default search engine is a closed port of this
    # machine (the browser preconnects to its own at start: DuckDuckGo here),
    # with network prediction off.
    os.makedirs(os.path.join(profile, 'Default'))
    with open(os.path.join(profile, 'Default', 'Preferences'), 'w') as f:
        json.dump({'default_search_provider_data': {'template_url_data': {
                       'keyword': 'none', 'short_name': 'none', 'url': 'http://127.0.0.1:9/?q={searchTerms}'}},
                   'net': {'network_prediction_options': 2},
                   'search': {'suggest_enabled': False},
                   'signin': {'allowed': False}}, f)
    opts = webdriver.ChromeOptions()
    # The browser itself, not Debian's wrapper /usr/bin/chromium, which adds Google
    # API keys (/etc/chromium.d/apikeys) that make it call Google's services.
    opts.binary_location = '/usr/lib/chromium/chromium'
    for flag in ('--headless=new', '--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage',
                 '--disable-quic', '--no-first-run', '--disable-background-networking',
                 '--disable-component-update', '--disable-sync', '--disable-extensions',
                 '--disable-default-apps', '--no-default-browser-check', '--no-pings',
                 '--disable-client-side-phishing-detection', '--disable-domain-reliability',
                 '--disable-search-engine-choice-screen', '--disable-field-trial-config',
                 '--metrics-recording-only', '--password-store=basic', '--no-service-autorun',
                 # The browser's own calls home (autofill, hints, the time, translation,
                 # preconnecting to the search engine): off, so that the recorder hears
                 # only what the pages ask for, and a page's request stands out.
                 '--disable-features=AutofillServerCommunication,OptimizationHints,'
                 'OptimizationHintsFetching,OptimizationGuideModelDownloading,NetworkTimeServiceQuerying,'
                 'Translate,MediaRouter,DialMediaRouteProvider,CertificateTransparencyComponentUpdater,'
                 'PreconnectToSearch,NavigationPredictor,SearchPrefetchServicePrefetching,NoStatePrefetch,SafeBrowsing,InterestFeedContentSuggestions,SignInProfileCreation',
                 # ... and the services it would still call, pointed at a closed
                 # port of this machine: sign-in, Google's base, the component updater.
                 '--gaia-url=http://127.0.0.1:9/', '--lso-url=http://127.0.0.1:9/',
                 '--google-base-url=http://127.0.0.1:9/',
                 '--component-updater=url-source=http://127.0.0.1:9/',
                 '--window-size=1280,900',
                 f'--user-data-dir={profile}',
                 # Everything but loopback (which Chromium never proxies) goes to the recorder.
                 f'--proxy-server=http://127.0.0.1:{proxy_port}'):
        opts.add_argument(flag)
    return webdriver.Chrome(service=Service('/usr/bin/chromedriver'), options=opts)


def wait_diagrams(drv):
    """Wait until no Mermaid block is still being drawn; return the counts."""
    js = """
      const b = [...document.querySelectorAll('div.mermaid-diagram')];
      return {
        all: b.length,
        pending: b.filter(e => !['svg', 'error'].includes(e.dataset.mermaid)).length,
        svg: b.filter(e => e.dataset.mermaid === 'svg' && e.querySelector('svg')).length,
        error: b.filter(e => e.dataset.mermaid === 'error').length,
        shown: b.filter(e => /^\\s*(sequenceDiagram|flowchart|graph|stateDiagram)/.test(e.innerText)).length,
        kinds: b.map(e => { const s = e.querySelector('svg'); return s ? (s.getAttribute('aria-roledescription') || 'svg') : 'none'; }),
      };"""
    end = time.time() + WAIT
    while True:
        r = drv.execute_script(js)
        if r['pending'] == 0 or time.time() > end:
            return r
        time.sleep(0.1)


def main():
    args = sys.argv[1:]
    shots = None
    if len(args) == 3 and args[1] == '--screenshots':
        shots = args[2]
    elif len(args) != 1:
        print('usage: site_browser.py SITE_DIR [--screenshots DIR]', file=sys.stderr)
        return 2
    site = os.path.abspath(args[0])
    proxy = Proxy()
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    server, served = serve(site)
    base = f'http://127.0.0.1:{server.server_address[1]}/'
    profile = tempfile.mkdtemp(prefix='site-browser.')
    drv = browser(proxy.server_address[1], profile)
    try:
        drv.set_page_load_timeout(WAIT)
        drv.get(base + 'index.html')
        nav = drv.execute_script("""
          return [...document.querySelectorAll('nav.md-nav--primary > ul > li.md-nav__item > a.md-nav__link')]
            .map(a => [a.textContent.trim(), a.getAttribute('href')]);""")
        print('contents: ' + ' | '.join(t for t, _ in nav))
        # The home page and every page of the contents that has a diagram (the
        # others are the same template around text: check_links.py reads them).
        pages = ['index.html']
        for _, href in nav:
            page = urllib.parse.urljoin('index.html', href or '').split('#')[0]
            try:
                with open(os.path.join(site, page), encoding='utf-8') as f:
                    drawn = 'class="mermaid-diagram"' in f.read()
            except OSError:
                drawn = False
            if drawn and page not in pages:
                pages.append(page)
        for page in pages:
            drv.get(base + page)
            r = wait_diagrams(drv)
            print(f"page {page}: diagrams {r['all']} svg {r['svg']} error {r['error']} source-shown {r['shown']}")
            if r['all']:
                print(f"diagram {page}: {' '.join(r['kinds'])}")
            if shots and page.endswith('lesson4-send-recv.html'):
                # The diagram whole, under its heading.
                drv.set_window_size(1280, 1120)
                drv.execute_script("""
                  const d = document.querySelector('div.mermaid-diagram');
                  const h = [...document.querySelectorAll('h2')].filter(h => h.compareDocumentPosition(d) & 4).pop();
                  window.scrollTo(0, (h || d).getBoundingClientRect().top + window.scrollY - 64);""")
                time.sleep(0.5)
                drv.save_screenshot(os.path.join(shots, 'lesson4.png'))
                print(f"screenshot {os.path.join(shots, 'lesson4.png')}")
                drv.set_window_size(1280, 900)
        # Search, as a reader does: the search box of the home page.
        drv.get(base + 'index.html')
        box = WebDriverWait(drv, WAIT).until(lambda d: d.find_element(By.CSS_SELECTOR, 'input.md-search__input'))
        WebDriverWait(drv, WAIT).until(lambda d: box.is_displayed())
        box.click()
        box.send_keys('RNR')
        try:
            WebDriverWait(drv, WAIT).until(lambda d: d.find_elements(By.CSS_SELECTOR, 'li.md-search-result__item > a'))
        except TimeoutException:
            pass
        time.sleep(0.5)  # the list fills in one go; let it settle
        hits = drv.execute_script("""
          return [...document.querySelectorAll('li.md-search-result__item > a')]
            .map(a => new URL(a.href).pathname.replace(/^\\//, ''));""")
        print('search RNR: ' + ' '.join(dict.fromkeys(hits)))
        if shots:
            drv.save_screenshot(os.path.join(shots, 'search.png'))
            print(f"screenshot {os.path.join(shots, 'search.png')}")
    finally:
        drv.quit()
        server.shutdown()
        proxy.shutdown()
        shutil.rmtree(profile, ignore_errors=True)
    print(f'served {len(served)}')
    print(f'outside {len(proxy.seen)}')
    for line in proxy.seen:
        print(f'outside: {line}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
