// The page: load the folder's model, tag what is pasted, highlight the entities with their type and
// score. Long texts are tagged a few sentences at a time with a progress bar (Tagger.documents).
import { loadTagger } from "./seqdistill/web.js";

const $ = (id) => document.getElementById(id);
const COLORS = ["#ffd54f", "#81d4fa", "#a5d6a7", "#f48fb1", "#ce93d8", "#ffab91", "#b0bec5", "#e6ee9c"];
const MAX_CHARS = 2_000_000;

function watchRequests(since) {
  // every fetch after `since` (resource timing sees each one the page makes, to any origin)
  const count = () => performance.getEntriesByType("resource").filter((e) => e.startTime >= since).length;
  new PerformanceObserver(() => {
    const n = count();
    $("requests").textContent = n;
    $("privacy").classList.toggle("leak", n > 0);
  }).observe({ type: "resource", buffered: true });
}

function render(doc, colors) {
  const out = $("out");
  out.replaceChildren();
  let pos = 0;
  const outer = [];
  for (const sp of [...doc.spans].sort((a, b) => a.char_start - b.char_start || b.char_end - a.char_end)) {
    if (outer.length && sp.char_start < outer[outer.length - 1].char_end) continue; // nested: the outer span is shown
    outer.push(sp);
  }
  for (const sp of outer) {
    out.append(doc.text.slice(pos, sp.char_start));
    const mark = document.createElement("mark");
    mark.style.background = colors[sp.type];
    mark.title = `${sp.type}, score ${sp.score === null ? "n/a" : sp.score.toFixed(3)}`;
    const sub = document.createElement("sub");
    sub.textContent = `${sp.type} ${sp.score === null ? "" : sp.score.toFixed(2)}`;
    mark.append(doc.text.slice(sp.char_start, sp.char_end), sub);
    out.append(mark);
    pos = sp.char_end;
  }
  out.append(doc.text.slice(pos));
}

async function main() {
  const started = performance.now();
  let tagger;
  try {
    tagger = await loadTagger(new URL("./", location.href));
  } catch (e) {
    $("model").textContent = "The model could not be loaded.";
    $("error").textContent = e.message;
    window.seqdistillError = e.message;
    return;
  }
  const loaded = performance.now();
  watchRequests(loaded);
  const m = tagger.meta;
  $("model").textContent = `${m.kind} ${m.model} (${m.quantize === "none" ? "fp32" : m.quantize}, decoder ${m.decoder}), loaded in ${Math.round(loaded - started)} ms`;
  const colors = Object.fromEntries(tagger.entityTypes.map((t, i) => [t, COLORS[i % COLORS.length]]));
  $("legend").replaceChildren(...tagger.entityTypes.map((t) => Object.assign(document.createElement("mark"), { textContent: t, style: `background:${colors[t]}` })));
  async function run() {
    const text = $("text").value;
    $("error").textContent = "";
    if (text.length > MAX_CHARS) {
      $("error").textContent = `The text has ${text.length.toLocaleString()} characters; this page tags up to ${MAX_CHARS.toLocaleString()}.`;
      return;
    }
    $("tag").disabled = true;
    const bar = $("progress");
    bar.hidden = false;
    const t0 = performance.now();
    try {
      const [doc] = await tagger.documents(text, { onProgress: (done, total) => Object.assign(bar, { value: done, max: total }) });
      const ms = performance.now() - t0;
      $("timing").textContent = `${doc.sentences.length} sentences, ${doc.spans.length} entities, ${Math.round(ms)} ms`;
      render(doc, colors);
    } catch (e) {
      $("error").textContent = e.message;
    } finally {
      $("tag").disabled = false;
      bar.hidden = true;
    }
  }
  $("tag").addEventListener("click", run);
  $("tag").disabled = false;
  window.seqdistill = { tagger, loadedMs: loaded - started, readyAt: loaded, run };
}

window.seqdistillReady = main();
