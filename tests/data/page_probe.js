// Injected into the nbconvert HTML page by tests/test_notebook.py, in two parts.
//
// Part 1 (first thing in <head>): record every error the page raises from then on: uncaught
// exceptions, failed resource loads, unhandled promise rejections and console.error calls.
//
// Part 2 (on the load event): measure what a reader sees in the output areas and write it
// as JSON into <pre id="tdm-probe">, which `chromium --dump-dom` hands back:
//   tables:   every table in an output, with its header cells, first-column cells and size;
//   texts:    every visible element holding text directly, with its WCAG contrast ratio
//             against the background actually painted behind it (opacity and
//             semi-transparent layers composited, as the browser does);
//   page:     the body's background colour (is the dark theme really dark?);
//   errors:   what part 1 recorded.

// @@PART1
window.__tdmErrors = [];
window.addEventListener(
  "error",
  (e) => {
    const t = e.target;
    const what = t && t !== window ? "failed to load " + (t.src || t.href || t.tagName) : "";
    window.__tdmErrors.push(e.message || what || "error event");
  },
  true,
);
window.addEventListener("unhandledrejection", (e) =>
  window.__tdmErrors.push("unhandled rejection: " + e.reason),
);
(() => {
  const original = console.error;
  console.error = (...args) => {
    window.__tdmErrors.push("console.error: " + args.join(" "));
    original.apply(console, args);
  };
})();
// @@END1

// @@PART2
window.addEventListener("load", () => {
  const parse = (css) => {
    const m = css.match(/rgba?\(([^)]+)\)/);
    if (!m) return [0, 0, 0, 0];
    const p = m[1].split(/[ ,/]+/).filter(Boolean).map(Number);
    return [p[0], p[1], p[2], p.length > 3 ? p[3] : 1];
  };
  const over = (top, bottom) => {
    // Source-over compositing of an RGBA colour onto an opaque one.
    const a = top[3];
    return [0, 1, 2].map((i) => top[i] * a + bottom[i] * (1 - a)).concat([1]);
  };
  const luminance = (c) => {
    const lin = c.slice(0, 3).map((v) => {
      const s = v / 255;
      return s <= 0.04045 ? s / 12.92 : ((s + 0.055) / 1.055) ** 2.4;
    });
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2];
  };
  const ratio = (a, b) => {
    const [hi, lo] = [luminance(a), luminance(b)].sort((x, y) => y - x);
    return (hi + 0.05) / (lo + 0.05);
  };
  const background = (el) => {
    // Layers from the element up to the first opaque one (the canvas is white).
    const layers = [];
    for (let n = el; n && n.nodeType === 1; n = n.parentElement) {
      const c = parse(getComputedStyle(n).backgroundColor);
      if (c[3] > 0) layers.push(c);
      if (c[3] >= 1) break;
    }
    let base = [255, 255, 255, 1];
    for (let i = layers.length - 1; i >= 0; i--) base = over(layers[i], base);
    return base;
  };
  const opacity = (el) => {
    let o = 1;
    for (let n = el; n && n.nodeType === 1; n = n.parentElement) {
      o *= Number(getComputedStyle(n).opacity);
    }
    return o;
  };
  const outputs = [...document.querySelectorAll(".jp-OutputArea-output")];
  const cellOf = (el) => {
    const cell = el.closest(".jp-Cell");
    const prompt = cell && cell.querySelector(".jp-InputPrompt");
    return prompt ? prompt.textContent.trim() : "";
  };
  const tables = [];
  const texts = [];
  for (const out of outputs) {
    for (const t of out.querySelectorAll("table")) {
      const r = t.getBoundingClientRect();
      tables.push({
        cell: cellOf(t),
        headers: [...t.querySelectorAll("thead th")].map((c) => c.textContent.trim()),
        first_column: [...t.querySelectorAll("tbody tr")].map((row) =>
          row.cells.length ? row.cells[0].textContent.trim() : "",
        ),
        width: r.width,
        height: r.height,
      });
    }
    for (const el of [out, ...out.querySelectorAll("*")]) {
      const own = [...el.childNodes]
        .filter((n) => n.nodeType === 3)
        .map((n) => n.textContent)
        .join("")
        .trim();
      if (!own || !el.getClientRects().length) continue;
      const bg = background(el);
      const fg = parse(getComputedStyle(el).color);
      fg[3] *= opacity(el);
      texts.push({
        cell: cellOf(el),
        text: own.slice(0, 2000),
        // html: our HTML outputs; error: tracebacks (IPython's ANSI colours, styled by
        // nbconvert); text: other plain-text outputs.
        kind: el.closest(".jp-RenderedHTMLCommon")
          ? "html"
          : el.closest('[data-mime-type="application/vnd.jupyter.stderr"]')
            ? "error"
            : "text",
        // An explicit inline colour (a status accent) rather than the page's text colour.
        accent: Boolean(el.closest('[style*="color:#"]')),
        color: getComputedStyle(el).color,
        background: "rgb(" + bg.slice(0, 3).map(Math.round).join(", ") + ")",
        contrast: Math.round(ratio(over(fg, bg), bg) * 100) / 100,
      });
    }
  }
  const pre = document.createElement("pre");
  pre.id = "tdm-probe";
  pre.style.display = "none";
  const page = getComputedStyle(document.body).backgroundColor;
  pre.textContent = JSON.stringify({ tables, texts, page, errors: window.__tdmErrors });
  document.body.appendChild(pre);
});
// @@END2
