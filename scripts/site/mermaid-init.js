// mermaid-init.js - draw every ```mermaid block of a page as SVG.
// pymdownx.superfences leaves each block's source in a
// <div class="mermaid-diagram"> (scripts/site/mkdocs.yml); this replaces it
// with the drawing, using the Mermaid that scripts/site.sh vendored beside
// it (assets/mermaid/mermaid.min.js): nothing is loaded from the network.
// A block that Mermaid cannot parse keeps its source, marked
// data-mermaid="error", and the error goes to the console.
(function () {
  "use strict";
  if (typeof mermaid === "undefined") {
    console.error("mermaid-init.js: assets/mermaid/mermaid.min.js did not load");
    return;
  }
  mermaid.initialize({ startOnLoad: false, securityLevel: "strict", theme: "default" });
  let count = 0;
  async function draw() {
    const blocks = document.querySelectorAll("div.mermaid-diagram:not([data-mermaid])");
    for (const block of blocks) {
      const source = block.textContent;
      block.setAttribute("data-mermaid", "drawing");
      try {
        const { svg } = await mermaid.render("mermaid-svg-" + count++, source);
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
    document$.subscribe(draw);
  } else {
    document.addEventListener("DOMContentLoaded", draw);
  }
})();
