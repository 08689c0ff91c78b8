// Words to a graph's inputs, and token scores back to words: the three input kinds of
// seqdistill/inference/onnx_runtime.py (`graph_feed`) over the framing of seqdistill/tokenization.py,
// ported. Each feed is {name: [type, data, dims]}, made into runtime tensors by the caller.

/** Each word's subword ids (tokenization.word_pieces): the tokenizer run on each word alone, without
 * special tokens; a word with none gets the unknown token. `distill-export --web` checks, when it
 * writes the folder, that the tokenizer gives each word the same pieces alone as in its sentence
 * (as Python's pre-tokenized encoding does), and refuses a tokenizer where it does not. */
export class WordPieces {
  constructor(tokenizer, unkId, maxWords = 100_000) {
    Object.assign(this, { tokenizer, unkId, maxWords, memo: new Map() });
  }

  word(w) {
    let ids = this.memo.get(w);
    if (ids === undefined) {
      ids = this.tokenizer.encode(w, { add_special_tokens: false }).ids;
      if (ids.length === 0) ids = [this.unkId];
      if (this.memo.size >= this.maxWords) this.memo.clear(); // bounded, as tokenization.PieceMemo
      this.memo.set(w, ids);
    }
    return ids;
  }

  sentences(batch) {
    return batch.map((words) => words.map((w) => this.word(w)));
  }
}

const int64 = (values) => BigInt64Array.from(values, (v) => BigInt(v));

/** The largest of `values` (Math.max(...values) overflows the stack past about 125,000 values). */
function most(values) {
  let m = -Infinity;
  for (const v of values) if (v > m) m = v;
  return m;
}

/** `bags` inputs: piece_ids and piece_mask [B, L, P], lengths [B]; with chars, char_ids [B, L, C];
 * with `wordRows` (a word vector table's lookup, export.js's wordList), word_ids [B, L]; with a
 * hashed table's WordHashing (export.js's wordHashing), word_ids [U + 1, K] and word_index [B, L]. */
export function bagInputs(pieces, batch, chars, wordRows = null) {
  const B = batch.length;
  const L = most(batch.map((w) => w.length));
  const P = most(pieces.flatMap((s) => s.map((p) => p.length)));
  const ids = new BigInt64Array(B * L * P);
  const mask = new Float32Array(B * L * P);
  pieces.forEach((sent, b) =>
    sent.forEach((p, w) =>
      p.forEach((id, k) => {
        ids[(b * L + w) * P + k] = BigInt(id);
        mask[(b * L + w) * P + k] = 1;
      }),
    ),
  );
  const feed = {
    piece_ids: ["int64", ids, [B, L, P]],
    piece_mask: ["float32", mask, [B, L, P]],
    lengths: ["int64", int64(batch.map((w) => w.length)), [B]],
  };
  if (chars) feed.char_ids = wordBytes(batch);
  if (wordRows instanceof WordHashing) [feed.word_ids, feed.word_index] = wordRows.distinctRows(batch);
  else if (wordRows) feed.word_ids = wordVectorRows(wordRows, batch);
  return feed;
}

/** Each word's row of the word vector table (tokenization.word_vector_rows): the word as written,
 * else lowercased (toLowerCase: Unicode's full lowercase mapping, as Python's str.lower), else 0. */
export function wordVectorRows(rows, batch) {
  const L = most(batch.map((w) => w.length));
  const out = new BigInt64Array(batch.length * L);
  batch.forEach((words, b) =>
    words.forEach((w, j) => (out[b * L + j] = BigInt(rows.get(w) ?? rows.get(w.toLowerCase()) ?? 0))),
  );
  return ["int64", out, [batch.length, L]];
}

const MAX_WORD_BYTES = 20;
const utf8 = new TextEncoder();

/** Each word's UTF-8 bytes plus one, its first 20 (tokenization.word_bytes). */
function wordBytes(batch) {
  const L = most(batch.map((w) => w.length));
  const encoded = batch.map((s) => s.map((w) => utf8.encode(w).subarray(0, MAX_WORD_BYTES)));
  const C = Math.max(1, most(encoded.flatMap((s) => s.map((b) => b.length))));
  const out = new BigInt64Array(batch.length * L * C);
  encoded.forEach((s, i) => s.forEach((bytes, j) => bytes.forEach((v, k) => (out[(i * L + j) * C + k] = BigInt(v + 1)))));
  return ["int64", out, [batch.length, L, C]];
}

/** `subwords` inputs: ids [B, S], lengths [B] in subwords, pool [B, L, S] (first subword, or mean). */
export function subwordInputs(pieces, batch, pooling) {
  const B = batch.length;
  const L = most(batch.map((w) => w.length));
  const seqs = pieces.map((s) => s.flat());
  const S = most(seqs.map((s) => s.length));
  const ids = new BigInt64Array(B * S);
  const pool = new Float32Array(B * L * S);
  pieces.forEach((sent, b) => {
    seqs[b].forEach((id, s) => (ids[b * S + s] = BigInt(id)));
    let s = 0;
    sent.forEach((p, w) => {
      if (pooling === "mean") for (let k = 0; k < p.length; k++) pool[(b * L + w) * S + s + k] = 1 / p.length;
      else pool[(b * L + w) * S + s] = 1;
      s += p.length;
    });
  });
  return {
    ids: ["int64", ids, [B, S]],
    lengths: ["int64", int64(seqs.map((s) => s.length)), [B]],
    pool: ["float32", pool, [B, L, S]],
  };
}

/** A transformer student's windows over `n` subwords (tokenization.subword_windows): [starts, owner]. */
export function subwordWindows(n, window) {
  if (n <= window) return [[0], new Array(n).fill(0)];
  const starts = new Set([n - window]);
  for (let s = 0; s < n - window; s += Math.max(1, Math.floor(window / 2))) starts.add(s);
  const sorted = [...starts].sort((a, b) => a - b);
  const owner = Array.from({ length: n }, (_, p) => {
    let best = 0;
    let bestContext = -Infinity;
    sorted.forEach((start, r) => {
      const context = Math.min(p - start, start + window - 1 - p);
      if (context > bestContext) [best, bestContext] = [r, context];
    });
    return best;
  });
  return [sorted, owner];
}

/** Framed rows as a feed, padded with `padId` (a transformer student's windows pad with 0, a
 * teacher's with its tokenizer's pad token, as tokenization.WordTokenizer does). */
function framed(rows, slots, weights, padId = 0) {
  const N = rows.length;
  const Lt = most(rows.map((r) => r.length));
  const ids = new BigInt64Array(N * Lt).fill(BigInt(padId));
  const attention = new BigInt64Array(N * Lt);
  const slot = new Int32Array(N * Lt).fill(-1);
  const weight = new Float32Array(N * Lt);
  rows.forEach((r, i) =>
    r.forEach((id, p) => {
      ids[i * Lt + p] = BigInt(id);
      attention[i * Lt + p] = 1n;
      slot[i * Lt + p] = slots[i][p];
      weight[i * Lt + p] = weights[i][p];
    }),
  );
  return {
    feed: { input_ids: ["int64", ids, [N, Lt]], attention_mask: ["int64", attention, [N, Lt]] },
    slot,
    weight,
  };
}

/** `segments` of a transformer student (onnx_runtime.window_inputs): windows of `window` subwords
 * framed by [CLS] and [SEP], each word pooled from its first subword in the window that owns it. */
export function windowInputs(pieces, batch, window, cls, sep) {
  const w = Math.min(window, most(pieces.map((s) => s.reduce((a, p) => a + p.length, 0))));
  const L = most(batch.map((x) => x.length));
  const rows = [];
  const slots = [];
  pieces.forEach((sent, b) => {
    const seq = sent.flat();
    const owner = new Array(seq.length).fill(-1);
    let first = 0;
    sent.forEach((p, k) => {
      owner[first] = b * L + k;
      first += p.length;
    });
    const [starts, owning] = subwordWindows(seq.length, w);
    starts.forEach((j, r) => {
      const mine = [];
      for (let p = j; p < Math.min(j + w, seq.length); p++) mine.push(owning[p] === r ? owner[p] : -1);
      rows.push([cls, ...seq.slice(j, j + w), sep]);
      slots.push([-1, ...mine, -1]);
    });
  });
  return framed(rows, slots, slots.map((s) => s.map((v) => (v >= 0 ? 1 : 0))));
}

/** `segments` of a teacher (tokenization.WordTokenizer): overlapping windows cut at word starts,
 * stride half a window, each word from the window where it has the most context on its poorer side;
 * framed by the tokenizer's own special tokens (`prefix`, `suffix`). */
export function teacherSegments(pieces, batch, { maxLength, pooling, prefix, suffix, padId }) {
  const window = maxLength - prefix.length - suffix.length;
  const stride = Math.max(1, Math.floor(window * 0.5));
  const W = most(batch.map((x) => x.length));
  const rows = [];
  const slots = [];
  const weights = [];
  pieces.forEach((sent, b) => {
    const ids = sent.flat();
    const spans = [];
    let pos = 0;
    for (const p of sent) {
      spans.push([pos, pos + p.length]);
      pos += p.length;
    }
    const windows = teacherWindows(spans, ids.length, window, stride);
    const owner = spans.map(([s, e]) => {
      let best = 0;
      let bestContext = null;
      windows.forEach(([ws, we], i) => {
        if (s < ws || s >= we) return;
        const context = Math.min(s - ws, we - e);
        if (bestContext === null || context > bestContext) [best, bestContext] = [i, context];
      });
      return best;
    });
    windows.forEach(([ws, we], wi) => {
      const tokens = [...prefix, ...ids.slice(ws, we), ...suffix];
      const slot = new Array(tokens.length).fill(-1);
      const weight = new Array(tokens.length).fill(0);
      spans.forEach(([s0, e0], w) => {
        if (owner[w] !== wi) return;
        const [s, e] = [Math.max(s0, ws), Math.min(e0, we)];
        for (let j = 0; j < e - s; j++) {
          const p = prefix.length + s - ws + j;
          slot[p] = b * W + w;
          weight[p] = pooling === "first" ? (j === 0 ? 1 : 0) : 1 / (e - s);
        }
      });
      rows.push(tokens);
      slots.push(slot);
      weights.push(weight);
    });
  });
  return framed(rows, slots, weights, padId);
}

function teacherWindows(spans, n, window, stride) {
  if (n <= window) return [[0, n]];
  const starts = spans.map(([s]) => s);
  const windows = [];
  let start = 0;
  for (;;) {
    let end = Math.min(start + window, n);
    if (end < n) {
      const cuts = starts.filter((s) => start < s && s <= end);
      if (cuts.length) end = most(cuts);
    }
    windows.push([start, end]);
    if (end >= n) return windows;
    const back = starts.filter((s) => s <= start + stride);
    const next = back.length ? most(back) : start;
    start = next > start ? next : end;
  }
}

/** Token scores [N, Lt, T] to word scores [B, W, T]: each word the weighted sum of its tokens
 * (onnx_runtime.pool_tokens), in float32 and in token order, as numpy adds them. */
export function poolTokens(tokenScores, T, slot, weight, B, W) {
  const out = new Float32Array(B * W * T);
  for (let k = 0; k < slot.length; k++) {
    if (slot[k] < 0 || weight[k] === 0) continue;
    for (let c = 0; c < T; c++) {
      out[slot[k] * T + c] = Math.fround(out[slot[k] * T + c] + Math.fround(tokenScores[k * T + c] * weight[k]));
    }
  }
  return out;
}

/** A hashed word table's rows of a word (tokenization.WordHashing, issue 83; the one specification is
 * there): the keys are "<" + the word lowercased + ">" and its n-grams of minn..maxn code points, in
 * order of n, then of position (the whole key once); each key's `hashes` rows are
 * 1 + FNV-1a-32([k] + UTF-8 of the key) mod rows, k = 0..hashes-1. */
export class WordHashing {
  constructor({ rows, minn, maxn, hashes }) {
    Object.assign(this, { rows, minn, maxn, hashes, memo: new Map() }); // each word's rows, once (bounded)
  }

  keys(word) {
    const whole = "<" + word.toLowerCase() + ">";
    const cps = Array.from(whole);
    const keys = [whole];
    for (let n = this.minn; n <= this.maxn; n++) {
      for (let i = 0; i + n <= cps.length; i++) {
        const gram = cps.slice(i, i + n).join("");
        if (gram !== whole) keys.push(gram);
      }
    }
    return keys;
  }

  wordRows(word) {
    let rows = this.memo.get(word);
    if (rows === undefined) {
      rows = [];
      for (const key of this.keys(word)) {
        const bytes = utf8.encode(key);
        for (let k = 0; k < this.hashes; k++) rows.push(1 + (fnv1a32([k], bytes) % this.rows));
      }
      if (this.memo.size >= 100_000) this.memo.clear(); // bounded, as tokenization.WordHashing's
      this.memo.set(word, rows);
    }
    return rows;
  }

  /** word_ids [U + 1, K]: the rows of each distinct word of the batch in order of first appearance (row 0
   * all zeros, the padding word; 0 past a word's rows), and word_index [B, L]: each word's row of them, 0
   * for padding words (WordHashing.distinct_rows). */
  distinctRows(batch) {
    const distinct = new Map();
    const L = most(batch.map((w) => w.length));
    const index = new BigInt64Array(batch.length * L);
    batch.forEach((words, b) =>
      words.forEach((w, j) => {
        if (!distinct.has(w)) distinct.set(w, distinct.size + 1);
        index[b * L + j] = BigInt(distinct.get(w));
      }),
    );
    const rows = [...distinct.keys()].map((w) => this.wordRows(w));
    const K = Math.max(1, most(rows.map((r) => r.length)));
    const out = new BigInt64Array((rows.length + 1) * K);
    rows.forEach((r, u) => r.forEach((v, k) => (out[(u + 1) * K + k] = BigInt(v))));
    return [
      ["int64", out, [rows.length + 1, K]],
      ["int64", index, [batch.length, L]],
    ];
  }
}

/** 32-bit FNV-1a over the bytes of `head` then `bytes` (tokenization.fnv1a32). */
export function fnv1a32(head, bytes) {
  let h = 0x811c9dc5;
  for (const b of head) h = Math.imul(h ^ b, 0x01000193) >>> 0;
  for (const b of bytes) h = Math.imul(h ^ b, 0x01000193) >>> 0;
  return h;
}
