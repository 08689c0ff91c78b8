// The runtime in Node against Python's Tagger: every fixture folder under $SEQDISTILL_WEB_FIXTURES
// (written by tests/test_web.py, `make test-web`: a `distill-export --web` folder of a tiny model of
// every kind, or of the demo's student, with golden.json, the answers of Python's Tagger on that
// very folder) gives the same words, tags, spans, UTF-16 offsets and scores (to 1e-4); and the words
// rules' character classes equal Python's `regex` classes code point by code point (classes.json).
import assert from "node:assert/strict";
import { readFile, rm, symlink, writeFile } from "node:fs/promises";
import path from "node:path";
import { test } from "node:test";
import { pairwiseSum, softmax as softmaxOf } from "../src/decode.js";
import { sha256 } from "../src/export.js";
import { WordHashing, fnv1a32 } from "../src/inputs.js";
import { loadTagger } from "../src/node.js";
import { CLASSES } from "../src/words.js";
import { brokenCopy, compareAnswers, fixtures } from "./support.js";

const root = process.env.SEQDISTILL_WEB_FIXTURES;
const skip = root ? false : "no fixtures: SEQDISTILL_WEB_FIXTURES is not set (make test-web sets it)";

test("every fixture model gives Tagger's answers in Node", { skip }, async (t) => {
  for (const dir of await fixtures(root)) {
    await t.test(path.basename(dir), async () => {
      const golden = JSON.parse(await readFile(path.join(dir, "golden.json"), "utf-8"));
      const tagger = await loadTagger(dir);
      const alone = await tagger.tag(golden.inputs, { batchSize: 1 });
      const batched = await tagger.tag(golden.inputs, { batchSize: 32 });
      assert.deepEqual(compareAnswers(golden, alone), []);
      assert.deepEqual(compareAnswers(golden, batched), []);
      if (golden.answers_min_score) {
        const kept = await tagger.tag(golden.inputs, { minScore: golden.min_score });
        assert.deepEqual(compareAnswers({ answers: golden.answers_min_score }, kept), []);
      }
    });
  }
});

test("the words rules' classes are Python's, code point by code point", { skip }, async () => {
  // where the two Unicode versions differ (a code point unassigned in Python's `regex` or in this
  // engine's ICU), the class may differ: those are left out, all others must agree
  const python = JSON.parse(await readFile(path.join(root, "classes.json"), "utf-8"));
  const known = new Uint8Array(0x110000).fill(1);
  for (const [lo, hi] of python.unassigned) known.fill(0, lo, hi + 1);
  const unassigned = /^\p{Cn}$/v;
  for (const [name, ranges] of Object.entries(python.classes)) {
    const inPython = new Uint8Array(0x110000);
    for (const [lo, hi] of ranges) inPython.fill(1, lo, hi + 1);
    const differ = [];
    for (let c = 0; c < 0x110000; c++) {
      if ((c >= 0xd800 && c <= 0xdfff) || !known[c]) continue;
      const ch = String.fromCodePoint(c);
      if (Boolean(inPython[c]) !== CLASSES[name].test(ch) && !unassigned.test(ch)) differ.push(c.toString(16));
    }
    assert.deepEqual(differ, [], `${name}: code points assigned in both Unicode versions and classed apart`);
  }
});

test("bad folders are refused by name", { skip }, async (t) => {
  const [dir] = await fixtures(root);
  const meta = JSON.parse(await readFile(path.join(dir, "export.json"), "utf-8"));
  const web = JSON.parse(await readFile(path.join(dir, "web.json"), "utf-8"));
  const cases = [
    [async (d) => writeFile(path.join(d, "export.json"), "{"), /export\.json: not valid JSON/],
    [async (d) => writeFile(path.join(d, "export.json"), JSON.stringify({ ...meta, format_version: 99 })), /format version 99 is newer/],
    [async (d) => writeFile(path.join(d, "model.onnx"), "not a graph"), /model\.onnx: damaged/],
    [async (d) => writeFile(path.join(d, "export.json"), JSON.stringify({ ...meta, files: { ...meta.files, "../x": "0" } })), /files "\.\.\/x" names a file outside/],
    [async (d) => writeFile(path.join(d, "export.json"), JSON.stringify({ ...meta, files: { ...meta.files, "%2e%2e/x": "0" } })), /names a file outside/],
    [async (d) => writeFile(path.join(d, "export.json"), JSON.stringify({ ...meta, onnx: "https://example.com/m.onnx" })), /onnx "https:\/\/example\.com\/m\.onnx" names a file outside/],
    [async (d) => rewriteWeb(d, meta, { format: "seqdistill-web", format_version: 9 }), /web format version 9 is newer/],
    [async (d) => rewriteWeb(d, meta, { ...web, tokenizer: { ...web.tokenizer, probe: undefined } }), /web\.json: "tokenizer" lacks/],
    [async (d) => rewriteWeb(d, meta, { ...web, tokenizer: { ...web.tokenizer, probe: { Peter: [7, 7, 7] } } }), /tokenizers\.js gives "Peter" the pieces/],
    [async (d) => writeFile(path.join(d, "web.json"), "{}"), /web\.json: damaged/],
    [async (d) => rm(path.join(d, "decode.safetensors")).then(() => symlink("/etc/hostname", path.join(d, "decode.safetensors"))), /a link to a file outside/],
  ];
  for (const [edit, message] of cases) await assert.rejects(loadTagger(await brokenCopy(t, dir, edit)), message);
});

test("a word list that is not its table, or outside the folder, is refused by name", { skip }, async (t) => {
  let dir = null;
  for (const d of await fixtures(root)) {
    if (JSON.parse(await readFile(path.join(d, "export.json"), "utf-8")).word_vectors) dir ??= d;
  }
  assert.ok(dir, "a fixture with word vectors");
  const meta = JSON.parse(await readFile(path.join(dir, "export.json"), "utf-8"));
  const file = meta.word_vectors.file;
  const longer = async (d) => {
    const text = `${await readFile(path.join(d, file), "utf-8")}\nextra`;
    await writeFile(path.join(d, file), text);
    const files = { ...meta.files, [file]: await sha256(new TextEncoder().encode(text)) };
    await writeFile(path.join(d, "export.json"), JSON.stringify({ ...meta, files }));
  };
  await assert.rejects(loadTagger(await brokenCopy(t, dir, longer)), /word_vectors\.txt: 13 lines \(13 distinct words\) for a table of 12 rows/);
  const outside = async (d) =>
    writeFile(path.join(d, "export.json"), JSON.stringify({ ...meta, word_vectors: { ...meta.word_vectors, file: "../x" } }));
  await assert.rejects(loadTagger(await brokenCopy(t, dir, outside)), /word_vectors\.file "\.\.\/x" names a file outside/);
});

test("a hashed word table hashes as Python's, and one whose hashing differs is refused by name", { skip }, async (t) => {
  let dir = null;
  for (const d of await fixtures(root)) {
    if (JSON.parse(await readFile(path.join(d, "export.json"), "utf-8")).word_hashing) dir ??= d;
  }
  assert.ok(dir, "a fixture with a hashed word table");
  const meta = JSON.parse(await readFile(path.join(dir, "export.json"), "utf-8"));
  // FNV-1a 32's published test vectors, and a key's rows as tokenization.WordHashing gives them
  assert.deepEqual([fnv1a32([], new TextEncoder().encode("")), fnv1a32([], new TextEncoder().encode("foobar"))], [0x811c9dc5, 0xbf9cf968]);
  assert.deepEqual(new WordHashing({ rows: 1000, minn: 3, maxn: 4, hashes: 2 }).keys("Paris"), ["<paris>", "<pa", "par", "ari", "ris", "is>", "<par", "pari", "aris", "ris>"]);
  const other = async (d) =>
    writeFile(path.join(d, "export.json"), JSON.stringify({ ...meta, word_hashing: { ...meta.word_hashing, rows: meta.word_hashing.rows + 1 } }));
  await assert.rejects(loadTagger(await brokenCopy(t, dir, other)), /word_hashing's fingerprint is not this runtime's/);
});

/** web.json replaced by `body`, with its sha256 in export.json, so that only its content is wrong. */
async function rewriteWeb(dir, meta, body) {
  const text = JSON.stringify(body);
  await writeFile(path.join(dir, "web.json"), text);
  const files = { ...meta.files, "web.json": await sha256(new TextEncoder().encode(text)) };
  await writeFile(path.join(dir, "export.json"), JSON.stringify({ ...meta, files }));
}

test("sums, means and softmax round as numpy's (numpy.json)", { skip }, async () => {
  const cases = JSON.parse(await readFile(path.join(root, "numpy.json"), "utf-8"));
  for (const { values, sum32, mean32, sum64, softmax } of cases) {
    const a = Float32Array.from(values);
    assert.equal(pairwiseSum(a), sum32, `float32 sum of ${values.length}`);
    assert.equal(Math.fround(pairwiseSum(a) / a.length), mean32, `float32 mean of ${values.length}`);
    assert.equal(pairwiseSum(Float64Array.from(values), (x) => x), sum64, `float64 sum of ${values.length}`);
    const mine = softmaxOf(Float32Array.from(a, (v) => v / Math.fround(1000)), a.length);
    // numpy's float32 exp is its own polynomial: a probability may differ in its last bits
    mine.forEach((p, i) => assert.ok(Math.abs(p - softmax[i]) <= 4e-7 * Math.max(1, softmax[i] * 8), `softmax ${i}: ${p} ${softmax[i]}`));
  }
});

test("bad text is refused by name; a long document is tagged in chunks", { skip }, async () => {
  const [dir] = await fixtures(root);
  const tagger = await loadTagger(dir);
  await assert.rejects(tagger.tag(["fine", "cut \ud83d here"]), /input 1: a lone surrogate \(U\+D83D\) at offset 4/);
  await assert.rejects(tagger.tag([42]), /input 0: a text \(string\) or a list of words/);
  const text = "Peter visits Paris and Rome. ".repeat(36_000); // 1 MB
  const progress = [];
  const [doc] = await tagger.documents(text, { onProgress: (done, total) => progress.push([done, total]) });
  assert.equal(doc.sentences.length, 36_000);
  assert.ok(progress.length > 10 && progress.at(-1)[0] === 36_000);
  assert.equal(doc.sentences[1].offsets[0][0], 29);
});
