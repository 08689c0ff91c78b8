// One round of benchmarks/web_page.py's measures of a web folder, in Node (onnxruntime-node) and in
// headless Chromium (onnxruntime-web's WASM backend, one thread), printed as one JSON object:
//   node benchmarks/web_page.mjs FOLDER SENTENCES.json [--golden GOLDEN.json] [--screenshot PNG]
// SENTENCES.json: {"sentences": [[words...]...], "paragraph": "text"}. With --golden, the differences
// of each runtime from Python's answers (js/test/support.js). Timing protocol, as Python's
// `inference.tagger.latency`: a warm-up batch, then 20 batches of `batch` sentences taken at
// (i * batch) mod (n - batch), the median of their ms per sentence.
import { readFile, readdir, stat } from "node:fs/promises";
import path from "node:path";
import { gzipSync, brotliCompressSync, constants } from "node:zlib";
import { chromium } from "../js/node_modules/playwright-core/index.mjs";
import { serve } from "../js/bin/serve.js";
import { loadTagger } from "../js/src/node.js";
import { compareAnswers, largestScoreDifference } from "../js/test/support.js";

const [folder, sentencesFile, ...rest] = process.argv.slice(2);
const option = (name) => (rest.includes(name) ? rest[rest.indexOf(name) + 1] : null);
const { sentences, paragraph } = JSON.parse(await readFile(sentencesFile, "utf-8"));
const golden = option("--golden") ? JSON.parse(await readFile(option("--golden"), "utf-8")) : null;

/** Median ms per sentence of `tag(part, batch)` over 20 batches; run in Node and, as source, in the page. */
async function latency(tag, sentences, batch, batches = 20) {
  const times = [];
  await tag(sentences.slice(0, batch), batch); // warm-up
  for (let i = 0; i < batches; i++) {
    const start = (i * batch) % Math.max(1, sentences.length - batch);
    const part = sentences.slice(start, start + batch);
    const t0 = performance.now();
    await tag(part, batch);
    times.push((performance.now() - t0) / part.length);
  }
  times.sort((a, b) => a - b);
  return (times[9] + times[10]) / 2;
}

async function files(dir, base = dir) {
  const out = [];
  for (const e of await readdir(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) out.push(...(await files(p, base)));
    else out.push(path.relative(base, p));
  }
  return out;
}

const result = { node: {}, chromium: {} };

// -- Node -------------------------------------------------------------------------------------------
const tagger = await loadTagger(folder, { threads: 1 });
const nodeTag = (part, batch) => tagger.tag(part, { batchSize: batch, scores: false });
result.node.ms_per_sentence = { 1: await latency(nodeTag, sentences, 1), 32: await latency(nodeTag, sentences, 32) };
if (golden) {
  const answers = await tagger.tag(golden.inputs);
  result.node.differences = compareAnswers(golden, answers);
  result.node.largest_score_difference = largestScoreDifference(golden, answers);
}

// -- Chromium ---------------------------------------------------------------------------------------
const server = await serve(folder);
// a static host serves files compressed ahead of time: each is compressed once before the page is timed
for (const rel of await files(folder)) {
  await fetch(new URL(rel, server.url), { headers: { "accept-encoding": "br" } }).then((r) => r.arrayBuffer());
}
const browser = await chromium.launch({ executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium", args: ["--no-sandbox"] });
try {
  const page = await browser.newPage({ viewport: { width: 1100, height: 760 } });
  const requests = [];
  page.on("requestfinished", async (r) => {
    const sizes = await r.sizes();
    const headers = await (await r.response()).allHeaders();
    requests.push({ url: r.url(), body: sizes.responseBodySize, headers: sizes.responseHeadersSize, encoding: headers["content-encoding"] ?? null });
  });
  await page.goto(server.url);
  await page.waitForFunction(() => window.seqdistill || window.seqdistillError, null, { timeout: 120_000 });
  const error = await page.evaluate(() => window.seqdistillError ?? null);
  if (error) throw new Error(`the page did not load its model: ${error}`);
  const first = await page.evaluate(async (text) => {
    const readyAt = window.seqdistill.readyAt;
    const t0 = performance.now();
    await window.seqdistill.tagger.documents(text);
    return { ready_ms: readyAt, first_tag_ms: performance.now() - t0, first_tag_after_navigation_ms: performance.now() };
  }, paragraph);
  Object.assign(result.chromium, first);
  // the same function, given to the page as source (evaluated by DevTools, which its policy allows)
  result.chromium.ms_per_sentence = await page.evaluate(`(async () => {
    const latency = ${latency};
    const tag = (part, batch) => window.seqdistill.tagger.tag(part, { batchSize: batch, scores: false });
    const sentences = ${JSON.stringify(sentences)};
    return { 1: await latency(tag, sentences, 1), 32: await latency(tag, sentences, 32) };
  })()`);
  if (golden) {
    const answers = await page.evaluate((inputs) => window.seqdistill.tagger.tag(inputs), golden.inputs);
    result.chromium.differences = compareAnswers(golden, answers);
    result.chromium.largest_score_difference = largestScoreDifference(golden, answers);
  }
  result.chromium.requests = requests;
  result.chromium.transferred = requests.reduce((s, r) => s + r.body + r.headers, 0);
  if (option("--screenshot")) {
    await page.fill("#text", paragraph);
    await page.click("#tag");
    await page.waitForFunction(() => document.querySelectorAll("#out mark").length > 0);
    await page.screenshot({ path: option("--screenshot"), fullPage: true });
  }
} finally {
  await browser.close();
  server.close();
}

// -- the folder's bytes, raw and compressed as a static host serves them ---------------------------
result.files = {};
for (const rel of await files(folder)) {
  if (rel === "golden.json") continue;
  const raw = await readFile(path.join(folder, rel));
  result.files[rel] = {
    raw: (await stat(path.join(folder, rel))).size,
    gzip: gzipSync(raw, { level: 9 }).length,
    br: brotliCompressSync(raw, { params: { [constants.BROTLI_PARAM_QUALITY]: 9 } }).length,
  };
}
console.log(JSON.stringify(result));
