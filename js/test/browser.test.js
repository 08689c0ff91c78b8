// The page in Chromium against Python's Tagger: each fixture folder (golden.test.js names them)
// served on loopback (bin/serve.js) and opened in headless Chromium through playwright-core; the
// golden inputs tagged in the page give 0 differences. Bad folders and bad text show their error on
// the page; a 1 MB text is tagged in chunks with its progress bar moving, and the page answers
// meanwhile. Chromium is Debian's (apt-get install chromium), or $CHROMIUM; without it this skips,
// saying so.
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { readFile, writeFile } from "node:fs/promises";
import path from "node:path";
import { after, before, test } from "node:test";
import { serve } from "../bin/serve.js";
import { brokenCopy, compareAnswers, fixtures } from "./support.js";

const root = process.env.SEQDISTILL_WEB_FIXTURES;
const chromiumPath = process.env.CHROMIUM ?? "/usr/bin/chromium";
const skip = !root
  ? "no fixtures: SEQDISTILL_WEB_FIXTURES is not set (make test-web sets it)"
  : !existsSync(chromiumPath)
    ? `no Chromium at ${chromiumPath}: apt-get install chromium, or set CHROMIUM; the browser test is skipped`
    : false;

let browser;
before(async () => {
  if (skip) return;
  const { chromium } = await import("playwright-core");
  browser = await chromium.launch({ executablePath: chromiumPath, args: ["--no-sandbox"] });
});
after(async () => browser?.close());

/** The page of `dir`, opened and loaded; its model loaded or its load error shown. */
export async function openPage(browserOrContext, dir) {
  const server = await serve(dir);
  const page = await browserOrContext.newPage();
  await page.goto(server.url);
  await page.waitForFunction(() => window.seqdistill || window.seqdistillError, null, { timeout: 120_000 });
  return { page, server };
}

test("every fixture model gives Tagger's answers in Chromium", { skip }, async (t) => {
  for (const dir of await fixtures(root)) {
    await t.test(path.basename(dir), async () => {
      const golden = JSON.parse(await readFile(path.join(dir, "golden.json"), "utf-8"));
      const { page, server } = await openPage(browser, dir);
      try {
        assert.equal(await page.evaluate(() => window.seqdistillError ?? null), null);
        const answers = await page.evaluate((inputs) => window.seqdistill.tagger.tag(inputs), golden.inputs);
        assert.deepEqual(compareAnswers(golden, answers), []);
        assert.equal(await page.textContent("#requests"), "0");
        // the page's policy stops a connection to any other origin before it is made
        const violated = await page.evaluate(async () => {
          const seen = new Promise((resolve) => document.addEventListener("securitypolicyviolation", (e) => resolve(e.effectiveDirective)));
          await fetch("http://127.0.0.2:9/leak", { method: "POST", body: "text" }).catch(() => null);
          return seen;
        });
        assert.equal(violated, "connect-src");
      } finally {
        await page.close();
        server.close();
      }
    });
  }
});

test("the page shows what is wrong with a folder or a text", { skip }, async (t) => {
  const [dir] = await fixtures(root);
  const meta = JSON.parse(await readFile(path.join(dir, "export.json"), "utf-8"));
  for (const [file, body, message] of [
    ["export.json", "{", /export\.json: not valid JSON/],
    ["export.json", JSON.stringify({ ...meta, format_version: 99 }), /format version 99 is newer than this runtime reads/],
    ["model.onnx", "not a graph", /model\.onnx: damaged/],
  ]) {
    const copy = await brokenCopy(t, dir, (d) => writeFile(path.join(d, file), body));
    const { page, server } = await openPage(browser, copy);
    assert.match(await page.textContent("#error"), message);
    await page.close();
    server.close();
  }
  const { page, server } = await openPage(browser, dir);
  try {
    await page.evaluate(() => (document.getElementById("text").value = "cut \ud83d here"));
    await page.click("#tag");
    await page.waitForFunction(() => document.getElementById("error").textContent.length > 0);
    assert.match(await page.textContent("#error"), /lone surrogate \(U\+D83D\) at offset 4/);
    // 1 MB: tagged a chunk at a time, the progress bar moving, the page answering in between
    await page.evaluate(() => (document.getElementById("text").value = "Peter visits Paris and Rome. ".repeat(36_000)));
    await page.click("#tag");
    await page.waitForFunction(() => Number(document.getElementById("progress").value) > 0, null, { timeout: 60_000 });
    const answered = await page.evaluate(() => new Promise((resolve) => setTimeout(() => resolve(true), 0)));
    assert.ok(answered);
    await page.waitForFunction(() => document.getElementById("timing").textContent.includes("36000 sentences"), null, { timeout: 300_000 });
    assert.equal(await page.textContent("#error"), "");
  } finally {
    await page.close();
    server.close();
  }
});
