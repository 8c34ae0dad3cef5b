// Mermaid fences as diagrams. The server marks a ```mermaid fence as div.code-block.mermaid (its source
// stays as the fallback and for Copy); this file draws it once the reply is finished, never mid-stream
// (each streamed update replaces the message, and half a diagram is a syntax error). The vendored
// build (static/vendor/mermaid, ~5 MB) is fetched only when the page has such a fence.
//
// The site's CSP has no 'unsafe-inline' for styles, so mermaid's SVG cannot go in as markup: its
// <style> element and style="" attributes would be refused. The SVG is parsed in an inert document
// instead, its <style> text becomes a constructed stylesheet and its style attributes are set through
// CSSOM (el.style.cssText), both of which CSP allows; the page's policy stays as strict as it was.
(function () {
  "use strict";
  const list = document.getElementById("messages");
  if (!list) { return; }
  const here = (document.currentScript && document.currentScript.src) || location.href;
  const MERMAID_URL = new URL("../vendor/mermaid/mermaid.min.js", here).href;
  const FENCES = "article.msg:not(.status-streaming) .code-block.mermaid:not([data-diagram])";
  let loading = null;
  let queue = Promise.resolve();  // mermaid.render calls must not overlap
  let counter = 0;
  let scheduled = false;
  let generation = 0;  // bumped by a theme switch: drawings begun before it are thrown away

  function load() {
    if (window.mermaid) { return Promise.resolve(window.mermaid); }
    if (!loading) {
      loading = new Promise(function (resolve, reject) {
        const script = document.createElement("script");
        script.src = MERMAID_URL;
        script.onload = function () { resolve(window.mermaid); };
        script.onerror = function () { loading = null; reject(new Error("mermaid did not load")); };
        document.head.appendChild(script);
      });
    }
    return loading;
  }

  function dark() {
    const picked = document.documentElement.getAttribute("data-theme");
    if (picked === "dark" || picked === "light") { return picked === "dark"; }
    return window.matchMedia && window.matchMedia("(prefers-color-scheme: dark)").matches;
  }

  // The SVG string as nodes, styles applied through CSSOM (see the top of this file).
  function place(svgText, id, holder) {
    const doc = new DOMParser().parseFromString(svgText, "text/html");
    const svg = doc.querySelector("svg");
    if (!svg) { throw new Error("mermaid returned no SVG"); }
    const css = Array.from(svg.querySelectorAll("style")).map(function (s) { s.remove(); return s.textContent; });
    const styled = Array.from(svg.querySelectorAll("[style]"));
    if (svg.hasAttribute("style")) { styled.push(svg); }
    const inline = styled.map(function (el) {
      const value = el.getAttribute("style");
      el.removeAttribute("style");
      return value;
    });
    if (css.length && "adoptedStyleSheets" in document) {
      const sheet = new CSSStyleSheet();
      sheet.replaceSync(css.join("\n"));  // mermaid scopes its rules to #id
      holder.sheet = sheet;
      document.adoptedStyleSheets = document.adoptedStyleSheets.concat([sheet]);
    }
    const node = document.importNode(svg, true);
    holder.appendChild(node);
    // importNode kept document order, so the same walk finds the same elements in the copy.
    const copies = Array.from(node.querySelectorAll("*"));
    const originals = Array.from(svg.querySelectorAll("*"));
    styled.forEach(function (el, i) {
      const copy = el === svg ? node : copies[originals.indexOf(el)];
      if (copy) { copy.style.cssText = inline[i]; }
    });
  }

  function draw(block, mermaid) {
    const pre = block.querySelector("pre");
    const source = pre ? pre.textContent : "";
    const id = "mermaid-diagram-" + (++counter);
    const gen = generation;
    block.dataset.diagram = "drawing";
    return mermaid.render(id, source).then(function (result) {
      if (!block.isConnected || gen !== generation) { return; }  // replaced or restyled meanwhile
      const holder = document.createElement("div");
      holder.className = "mermaid-diagram";
      holder.setAttribute("role", "img");
      holder.setAttribute("aria-label", "Diagram");
      place(result.svg, id, holder);
      block.insertBefore(holder, pre);
      pre.hidden = true;  // Copy still copies the source
      block.dataset.diagram = "drawn";
    }).catch(function (err) {
      // Not valid mermaid: the source stays as an ordinary code block.
      if (gen === generation) { block.dataset.diagram = "error"; }
      const leftover = document.getElementById("d" + id);  // mermaid's scratch node after a failure
      if (leftover) { leftover.remove(); }
      if (window.console) { console.warn("Diagram not drawn:", err && err.message ? err.message : err); }
    });
  }

  function scan() {
    scheduled = false;
    const blocks = Array.from(list.querySelectorAll(FENCES));
    if (!blocks.length) { return; }
    blocks.forEach(function (b) { b.dataset.diagram = "queued"; });
    queue = queue.then(load).then(function (mermaid) {
      // Each batch: the theme may have changed since the last one. startOnLoad off: we pick the blocks.
      // fontFamily: mermaid measures labels in a scratch node whose inline styles CSP blocks, i.e. in
      // the page's font; drawing in that same font keeps the labels inside their boxes.
      mermaid.initialize({
        startOnLoad: false,
        securityLevel: "strict",
        theme: dark() ? "dark" : "default",
        fontFamily: window.getComputedStyle(list).fontFamily,
        // SVG <text> labels: HTML labels in <foreignObject> are sized from inline styles CSP refuses
        // while mermaid measures, which left them misplaced in oversized boxes.
        htmlLabels: false,
        flowchart: { htmlLabels: false },
      });
      return blocks.reduce(function (p, block) {
        return p.then(function () { return draw(block, mermaid); });
      }, Promise.resolve());
    }).catch(function (err) {
      blocks.forEach(function (b) { b.dataset.diagram = "error"; });
      if (window.console) { console.warn(err); }
    });
  }

  function schedule() {
    if (!scheduled) { scheduled = true; window.requestAnimationFrame(scan); }
  }

  // A theme switch redraws every diagram in the new colours.
  function redraw() {
    generation += 1;
    list.querySelectorAll(".code-block.mermaid[data-diagram]").forEach(function (block) {
      const holder = block.querySelector(".mermaid-diagram");
      if (holder) {
        if (holder.sheet) {
          document.adoptedStyleSheets = document.adoptedStyleSheets.filter(function (s) { return s !== holder.sheet; });
        }
        holder.remove();
      }
      const pre = block.querySelector("pre");
      if (pre) { pre.hidden = false; }
      delete block.dataset.diagram;
    });
    schedule();
  }

  // Finished replies arrive as replaced <article>s (chat.js), so watching the list's children is enough.
  new MutationObserver(schedule).observe(list, { childList: true });
  new MutationObserver(redraw).observe(document.documentElement, { attributes: true, attributeFilter: ["data-theme"] });
  if (window.matchMedia) {
    const query = window.matchMedia("(prefers-color-scheme: dark)");
    if (query.addEventListener) { query.addEventListener("change", redraw); }
  }
  schedule();
})();
