// mermaid-init.js - draw every ```mermaid block of a page as SVG.
// pymdownx.superfences leaves each block's source in a
// <div class="mermaid-diagram"> (scripts/site/mkdocs.yml); this replaces it
// with the drawing, using the Mermaid that scripts/site/build.sh vendored into
// the site (assets/mermaid/mermaid.min.js, 5 MiB: loaded only by a page
// that has a diagram). Nothing is loaded from the network.
// A block that Mermaid cannot parse keeps its source, marked
// data-mermaid="error", and the error goes to the console.
(function () {
  "use strict";
  // assets/site/mermaid-init.js -> assets/mermaid/mermaid.min.js, wherever the page is.
  const bundle = new URL("../mermaid/mermaid.min.js", document.currentScript.src).href;
  let loading = null;
  let count = 0;

  function load() {
    if (!loading) {
      loading = new Promise((resolve, reject) => {
        const s = document.createElement("script");
        s.src = bundle;
        s.onload = () => {
          mermaid.initialize({ startOnLoad: false, securityLevel: "strict", theme: "default" });
          resolve();
        };
        s.onerror = () => reject(new Error("mermaid-init.js: " + bundle + " did not load"));
        document.head.appendChild(s);
      });
    }
    return loading;
  }

  async function draw() {
    const blocks = document.querySelectorAll("div.mermaid-diagram:not([data-mermaid])");
    if (blocks.length === 0) return;
    blocks.forEach((b) => b.setAttribute("data-mermaid", "drawing"));
    try {
      await load();
    } catch (err) {
      blocks.forEach((b) => b.setAttribute("data-mermaid", "error"));
      console.error(err);
      return;
    }
    for (const block of blocks) {
      try {
        const { svg } = await mermaid.render("mermaid-svg-" + count++, block.textContent);
        block.innerHTML = svg;
        block.setAttribute("data-mermaid", "svg");
      } catch (err) {
        block.setAttribute("data-mermaid", "error");
        console.error("mermaid-init.js: a diagram did not draw:", err);
      }
    }
  }

  // material's document$ fires on every page it shows; a plain page load otherwise.
  if (typeof document$ !== "undefined") {
    document$.subscribe(() => draw());
  } else {
    document.addEventListener("DOMContentLoaded", () => draw());
  }
})();
