// The runtime's own pieces, checked without a model: decoding against brute-force enumeration, the
// span functions against hand-made cases, offsets, safetensors, the sentence rule.
import assert from "node:assert/strict";
import { test } from "node:test";
import { Decoder, crfMarginals, flattenSpans, spansFromLayers, spansToTags, tagsToSpans, viterbi } from "../src/decode.js";
import { readSafetensors } from "../src/export.js";
import { lengthBatches, segments, sentences } from "../src/tagger.js";
import { codePointToUtf16, joinWords, loneSurrogate, splitter } from "../src/words.js";

function random(seed) {
  let s = seed;
  return () => ((s = (s * 1103515245 + 12345) % 2 ** 31) / 2 ** 31) * 4 - 2;
}

function allPaths(n, T) {
  if (n === 0) return [[]];
  return allPaths(n - 1, T).flatMap((p) => Array.from({ length: T }, (_, y) => [...p, y]));
}

function score(path, E, T, A, start, end) {
  let s = start[path[0]] + end[path[path.length - 1]];
  path.forEach((y, t) => {
    s += E[t * T + y];
    if (t) s += A[path[t - 1] * T + y];
  });
  return s;
}

test("viterbi and the CRF marginals equal brute-force enumeration", () => {
  for (const [n, T, seed] of [[1, 3, 1], [4, 3, 2], [5, 4, 3], [3, 5, 4]]) {
    const r = random(seed);
    const E = Float32Array.from({ length: n * T }, r);
    const A = Float32Array.from({ length: T * T }, r);
    const start = Float32Array.from({ length: T }, r);
    const end = Float32Array.from({ length: T }, r);
    A[1] = -Infinity; // a forbidden move, as a tag scheme gives
    const paths = allPaths(n, T).map((p) => [p, score(p, E, T, A, start, end)]);
    const best = paths.reduce((a, b) => (b[1] > a[1] ? b : a));
    assert.deepEqual(viterbi(E, n, T, A, start, end), best[0]);
    const z = paths.reduce((s, [, v]) => s + Math.exp(v), 0);
    const probs = crfMarginals(E, n, T, A, start, end);
    for (let t = 0; t < n; t++) {
      for (let y = 0; y < T; y++) {
        const want = paths.filter(([p]) => p[t] === y).reduce((s, [, v]) => s + Math.exp(v), 0) / z;
        assert.ok(Math.abs(probs[t * T + y] - want) < 1e-9, `p(y_${t} = ${y})`);
      }
    }
  }
});

test("a tie goes to the lowest tag id, as numpy's argmax", () => {
  const T = 3;
  const zeros = new Float32Array(T);
  assert.deepEqual(viterbi(new Float32Array(2 * T), 2, T, new Float32Array(T * T), zeros, zeros), [0, 0]);
});

test("spans of tags under every scheme, and back", () => {
  assert.deepEqual(tagsToSpans(["B-PER", "I-PER", "O", "B-LOC"], "IOB2"), [[0, 2, "PER"], [3, 4, "LOC"]]);
  assert.deepEqual(tagsToSpans(["I-PER", "B-PER", "O"], "IOB1"), [[0, 1, "PER"], [1, 2, "PER"]]);
  assert.deepEqual(tagsToSpans(["S-LOC", "B-PER", "E-PER", "I-ORG"], "BIOES"), [[0, 1, "LOC"], [1, 3, "PER"], [3, 4, "ORG"]]);
  assert.deepEqual(tagsToSpans(["U-LOC", "B-PER", "L-PER"], "BILOU"), [[0, 1, "LOC"], [1, 3, "PER"]]);
  assert.deepEqual(tagsToSpans(["PER", "I", "O", "LOC"], "sBIO"), [[0, 2, "PER"], [3, 4, "LOC"]]);
  assert.deepEqual(tagsToSpans(["B-PER", "I-LOC"], "IOB2"), [[0, 1, "PER"], [1, 2, "LOC"]]); // lenient: a stray I opens
  assert.deepEqual(spansToTags([[1, 3, "PER"], [0, 1, "LOC"]], 4, "BIOES"), ["S-LOC", "B-PER", "E-PER", "O"]);
  assert.deepEqual(spansToTags([[0, 1, "PER"], [1, 2, "PER"]], 2, "IOB1"), ["I-PER", "B-PER"]);
});

test("BILOU layers: lenient spans, the outermost kept flat, Viterbi never invalid", () => {
  const [O, B, I, L, U] = [0, 1, 2, 3, 4];
  assert.deepEqual(spansFromLayers([[B, U], [I, O], [L, O], [I, O], [O, B]], ["ORG", "LOC"]), [
    [0, 1, "LOC"], [0, 3, "ORG"], [3, 4, "ORG"], [4, 5, "LOC"],
  ]);
  assert.deepEqual(flattenSpans([[0, 1, "LOC"], [0, 3, "ORG"], [2, 4, "PER"], [3, 4, "ORG"]]), [[0, 3, "ORG"], [3, 4, "ORG"]]);
  const ln = Math.log;
  const t = new Float32Array(25).fill(-Infinity);
  const next = { [O]: [O, B, U], [B]: [I, L], [I]: [I, L], [L]: [O, B, U], [U]: [O, B, U] };
  for (const [a, bs] of Object.entries(next)) for (const b of bs) t[a * 5 + b] = -ln(bs.length);
  const start = Float32Array.from([O, B, I, L, U], (x) => ([O, B, U].includes(x) ? -ln(3) : -Infinity));
  const end = Float32Array.from([O, B, I, L, U], (x) => ([O, L, U].includes(x) ? 0 : -Infinity));
  const d = new Decoder({ kind: "bilou", tags: ["O", "B-X", "I-X"], scheme: "IOB2", transitions: { transitions: t, start, end }, entityTypes: ["X"] });
  const r = random(9);
  for (let k = 0; k < 20; k++) {
    const logits = Float32Array.from({ length: 6 * 5 }, r);
    const layer = d.layers(logits, 6).map((row) => row[0]);
    assert.ok([O, B, U].includes(layer[0]) && [O, L, U].includes(layer[5]));
    layer.slice(1).forEach((y, i) => assert.ok(next[layer[i]].includes(y), `${layer}`));
  }
});

test("batches of similar length, none padded past twice its length", () => {
  assert.deepEqual(lengthBatches([3, 0, 1, 7, 2, 2], 2), [[2, 4], [5, 0], [3]]);
});

test("offsets: code points to UTF-16, pre-split words, lone surrogates", () => {
  const at = codePointToUtf16("a👍🏽b");
  assert.deepEqual([0, 1, 2, 3, 4].map(at), [0, 1, 3, 5, 6]);
  assert.deepEqual(joinWords(["New", "York"]), ["New York", [[0, 3], [4, 8]]]);
  assert.equal(loneSurrogate("ok 👍"), -1);
  assert.equal(loneSurrogate("ok \ud83d!"), 3);
  assert.equal(loneSurrogate("\udc4d"), 0);
  const [words, offsets] = splitter("default")("😀 Zoë's café");
  assert.deepEqual(words, ["😀", "Zoë's", "café"]);
  assert.deepEqual(offsets, [[0, 2], [3, 8], [9, 13]]);
  assert.throws(() => splitter("mecab")("東京"), /pre-split words/);
  assert.throws(() => splitter("spaces"), /not one of default, ptb, mecab/);
});

test("sentences: a line break ends one, abbreviations do not, long ones are cut", () => {
  const text = "Mr. Smith works at the U.S. Department of Agriculture. He left.\nNew line";
  assert.deepEqual(sentences(text, "ptb").map(([a, b]) => text.slice(a, b)), [
    "Mr. Smith works at the U.S. Department of Agriculture.",
    "He left.",
    "New line",
  ]);
  const long = Array.from({ length: 10 }, (_, i) => `w${i}`).join(" ");
  assert.deepEqual(sentences(long, "default", 4).map(([a, b]) => long.slice(a, b)), ["w0 w1 w2 w3", "w4 w5 w6 w7", "w8 w9"]);
});

test("sentences read a window at a time are the sentences read at once", () => {
  const text = "Short one. A longer sentence, with a comma; and more words! Why? ".repeat(40) + "x".repeat(300) + ". End";
  const atOnce = [...new Intl.Segmenter("en", { granularity: "sentence" }).segment(text)].map((s) => [s.segment, s.index]);
  for (const width of [16, 64, 1000, 100_000]) assert.deepEqual([...segments(text, width)], atOnce, `width ${width}`);
});

test("the loopback server answers a malformed path with 400 and keeps serving", async () => {
  const { serve } = await import("../bin/serve.js");
  const server = await serve(new URL("../page/", import.meta.url).pathname);
  try {
    assert.equal((await fetch(new URL("/%E0%A4%A", server.url))).status, 400);
    assert.equal((await fetch(new URL("/..%2fpackage.json", server.url))).status, 403);
    assert.equal((await fetch(new URL("/index.html", server.url))).status, 200);
  } finally {
    server.close();
  }
});

test("safetensors: F32 tensors by name, other dtypes refused", () => {
  const header = new TextEncoder().encode(JSON.stringify({ a: { dtype: "F32", shape: [2], data_offsets: [0, 8] } }));
  const bytes = new Uint8Array(8 + header.length + 8);
  new DataView(bytes.buffer).setBigUint64(0, BigInt(header.length), true);
  bytes.set(header, 8);
  const data = new Float32Array([1.5, -Infinity]);
  bytes.set(new Uint8Array(data.buffer), 8 + header.length);
  assert.deepEqual(Array.from(readSafetensors(bytes, "x").a.data), [1.5, -Infinity]);
  const bad = new TextEncoder().encode(JSON.stringify({ a: { dtype: "F16", shape: [1], data_offsets: [0, 2] } }));
  const b2 = new Uint8Array(8 + bad.length + 2);
  new DataView(b2.buffer).setBigUint64(0, BigInt(bad.length), true);
  b2.set(bad, 8);
  assert.throws(() => readSafetensors(b2, "decode.safetensors"), /decode.safetensors: tensor a is F16/);
});
