// Word scores to tags, spans and span scores: seqdistill/decode.py, seqdistill/bilou.py and the
// span functions of seqdistill/cache_schema/labels.py, ported.
//
// Arithmetic follows numpy's: the Viterbi sums are float32 (Math.fround after every operation, so a
// tie breaks as it does in numpy, to the lowest tag id, and a NaN wins as numpy's argmax lets it),
// the CRF marginals float64 over float32 inputs divided by the float32 temperature, softmax
// probabilities and their means float32, every sum in numpy's pairwise order (`pairwiseSum`). Left
// apart: numpy's float32 exp is its own SIMD polynomial, not correctly rounded, so a probability may
// differ in its last bit (about 1e-7). The scores a graph gives differ between ONNX Runtime builds
// in their last bits too (WASM against x86 kernels), so a path decided by less than that could
// differ; the golden tests count such differences (none so far).

const f = Math.fround;
const same = (x) => x;

/** The sum of `a[lo:hi]` as numpy adds a contiguous array (its pairwise_sum: sequential under 8
 * values, 8 running sums up to 128, halves beyond), rounding each addition by `round` (Math.fround
 * for float32, identity for float64), so that a sum rounds as numpy's does. */
export function pairwiseSum(a, round = f, lo = 0, hi = a.length) {
  const n = hi - lo;
  if (n < 8) {
    let s = 0;
    for (let i = lo; i < hi; i++) s = round(s + a[i]);
    return s;
  }
  if (n <= 128) {
    const r = [];
    for (let j = 0; j < 8; j++) r.push(round(a[lo + j]));
    let i = 8;
    for (; i < n - (n % 8); i += 8) for (let j = 0; j < 8; j++) r[j] = round(r[j] + a[lo + i + j]);
    let s = round(round(round(r[0] + r[1]) + round(r[2] + r[3])) + round(round(r[4] + r[5]) + round(r[6] + r[7])));
    for (; i < n; i++) s = round(s + a[lo + i]);
    return s;
  }
  const half = Math.floor(n / 2) - (Math.floor(n / 2) % 8);
  return round(pairwiseSum(a, round, lo, lo + half) + pairwiseSum(a, round, lo + half, hi));
}

/** numpy's argmax of `x[offset:offset+C]`: the first maximum, or the first NaN. */
function argmax(x, offset, C) {
  let best = 0;
  for (let c = 0; c < C; c++) {
    if (Number.isNaN(x[offset + c])) return c;
    if (x[offset + c] > x[offset + best]) best = c;
  }
  return best;
}

/** The best path of one sentence: `emissions` [n * T] float32, `transitions` [T * T], `start`, `end` [T]
 * (paper 000, eq. 1: start[y_1] + sum_t E[t, y_t] + sum_t A[y_{t-1}, y_t] + end[y_n]). */
export function viterbi(emissions, n, T, transitions, start, end) {
  let delta = new Float32Array(T);
  for (let j = 0; j < T; j++) delta[j] = f(start[j] + emissions[j]);
  const back = new Int32Array(n * T);
  let next = new Float32Array(T);
  for (let t = 1; t < n; t++) {
    for (let j = 0; j < T; j++) {
      let best = 0;
      let top = f(delta[0] + transitions[j]);
      for (let i = 1; i < T; i++) {
        const c = f(delta[i] + transitions[i * T + j]);
        if (c > top || (Number.isNaN(c) && !Number.isNaN(top))) {
          top = c;
          best = i;
        }
      }
      back[t * T + j] = best;
      next[j] = f(top + emissions[t * T + j]);
    }
    [delta, next] = [next, delta];
  }
  let cur = argmax(
    Float32Array.from(delta, (d, j) => d + end[j]),
    0,
    T,
  );
  const path = new Array(n);
  path[n - 1] = cur;
  for (let t = n - 1; t > 0; t--) {
    cur = back[t * T + cur];
    path[t - 1] = cur;
  }
  return path;
}

function logSumExp(values) {
  let m = -Infinity;
  for (const v of values) if (v > m) m = v;
  if (!Number.isFinite(m)) m = 0;
  let s = 0;
  for (const v of values) s += Math.exp(v - m);
  return m + Math.log(s);
}

/** p(y_t = y | x) by forward-backward in log space, [n * T] (decode.crf_marginals). */
export function crfMarginals(emissions, n, T, transitions, start, end) {
  const alpha = new Float64Array(n * T);
  const beta = new Float64Array(n * T);
  const column = new Float64Array(T);
  for (let j = 0; j < T; j++) alpha[j] = start[j] + emissions[j];
  for (let t = 1; t < n; t++) {
    for (let j = 0; j < T; j++) {
      for (let i = 0; i < T; i++) column[i] = alpha[(t - 1) * T + i] + transitions[i * T + j];
      alpha[t * T + j] = logSumExp(column) + emissions[t * T + j];
    }
  }
  for (let j = 0; j < T; j++) column[j] = alpha[(n - 1) * T + j] + end[j];
  const logZ = logSumExp(column);
  for (let j = 0; j < T; j++) beta[(n - 1) * T + j] = end[j];
  for (let t = n - 2; t >= 0; t--) {
    for (let i = 0; i < T; i++) {
      for (let j = 0; j < T; j++) column[j] = transitions[i * T + j] + emissions[(t + 1) * T + j] + beta[(t + 1) * T + j];
      beta[t * T + i] = logSumExp(column);
    }
  }
  const probs = new Float64Array(n * T);
  for (let k = 0; k < n * T; k++) probs[k] = Math.exp(alpha[k] + beta[k] - logZ);
  return probs;
}

function rowMax(x, r, C) {
  let m = -Infinity;
  for (let c = 0; c < C; c++) if (x[r + c] > m || Number.isNaN(x[r + c])) m = x[r + c];
  return m;
}

/** Softmax over the last axis of rows of `C` values (float32, as numpy computes it). */
export function softmax(x, C) {
  const out = new Float32Array(x.length); // Float32Array: every value stored is rounded to float32
  for (let r = 0; r < x.length; r += C) {
    const m = rowMax(x, r, C);
    for (let c = 0; c < C; c++) out[r + c] = Math.exp(f(x[r + c] - m));
    const s = pairwiseSum(out, f, r, r + C);
    for (let c = 0; c < C; c++) out[r + c] = out[r + c] / s;
  }
  return out;
}

function logSoftmax(x, C) {
  const out = new Float32Array(x.length);
  for (let r = 0; r < x.length; r += C) {
    const m = rowMax(x, r, C);
    for (let c = 0; c < C; c++) out[r + c] = Math.exp(f(x[r + c] - m));
    const l = f(Math.log(pairwiseSum(out, f, r, r + C)));
    for (let c = 0; c < C; c++) out[r + c] = f(x[r + c] - m) - l;
  }
  return out;
}

// -- tags and spans (cache_schema/labels.py) -----------------------------------------------------

const PREFIX_ROLES = {
  IOB1: { B: "B", I: "I" },
  IOB2: { B: "B", I: "I" },
  BIOES: { B: "B", I: "I", E: "E", S: "S" },
  BILOU: { B: "B", I: "I", L: "E", U: "S" },
  BMES: { B: "B", M: "I", E: "E", S: "S" },
  BMEWO: { B: "B", M: "I", E: "E", W: "S" },
};

/** A tag's [role, type] under `scheme` (labels.parse_tag; the schema's own tags only). */
export function parseTag(tag, scheme) {
  if (tag === "O") return ["O", null];
  if (scheme === "sBIO") return tag === "I" ? ["I", null] : ["B", tag];
  const dash = tag.indexOf("-");
  const role = PREFIX_ROLES[scheme]?.[tag.slice(0, dash)];
  if (dash < 0 || role === undefined) throw new Error(`ill-formed ${scheme} tag ${JSON.stringify(tag)}`);
  return [role, tag.slice(dash + 1)];
}

function formatTag(role, type, scheme) {
  if (role === "O") return "O";
  if (scheme === "sBIO") return role === "B" ? type : "I";
  const letter = Object.entries(PREFIX_ROLES[scheme]).find(([, r]) => r === role)[0];
  return `${letter}-${type}`;
}

/** Entities of a tag sequence as [start, end exclusive, type] (labels.tags_to_spans). */
export function tagsToSpans(tags, scheme) {
  const spans = [];
  let start = null;
  let type = null;
  const close = (end) => {
    if (start !== null) spans.push([start, end, type]);
    start = null;
    type = null;
  };
  tags.forEach((tag, i) => {
    const [role, t] = parseTag(tag, scheme);
    if (role === "O") return close(i);
    const continues = start !== null && (role === "I" || role === "E") && (scheme === "sBIO" || t === type);
    if (!continues) {
      close(i);
      start = i;
      type = t;
    }
    if (role === "E" || role === "S") close(i + 1);
  });
  close(tags.length);
  return spans;
}

const bySpan = (a, b) => a[0] - b[0] || a[1] - b[1] || (a[2] < b[2] ? -1 : a[2] > b[2] ? 1 : 0);

/** Non-overlapping spans as a tag sequence of `length` (labels.spans_to_tags). */
export function spansToTags(spans, length, scheme) {
  const out = new Array(length).fill("O");
  let prevEnd = -1;
  let prevType = null;
  for (const [start, end, type] of [...spans].sort(bySpan)) {
    const n = end - start;
    let roles;
    if (scheme === "IOB1") roles = [prevEnd === start && prevType === type ? "B" : "I", ...Array(n - 1).fill("I")];
    else if (scheme === "IOB2" || scheme === "sBIO") roles = ["B", ...Array(n - 1).fill("I")];
    else roles = n === 1 ? ["S"] : ["B", ...Array(n - 2).fill("I"), "E"];
    roles.forEach((r, j) => (out[start + j] = formatTag(r, type, scheme)));
    prevEnd = end;
    prevType = type;
  }
  return out;
}

// -- BILOU layers (bilou.py) ---------------------------------------------------------------------

const [O, B, I, L, U] = [0, 1, 2, 3, 4];

/** [start, end, type] spans of per-type BILOU layers `layers[i][e]`, sorted (bilou.spans_from_layers). */
export function spansFromLayers(layers, types) {
  const spans = [];
  types.forEach((type, e) => {
    let start = null;
    layers.forEach((row, i) => {
      const t = row[e];
      if ((t === B || t === U) && start !== null) {
        spans.push([start, i, type]);
        start = null;
      }
      if (t === U) {
        spans.push([i, i + 1, type]);
        start = null;
      } else if (t === B || ((t === I || t === L) && start === null)) {
        start = i;
        if (t === L) {
          spans.push([i, i + 1, type]);
          start = null;
        }
      } else if (t === L && start !== null) {
        spans.push([start, i + 1, type]);
        start = null;
      } else if (t === O && start !== null) {
        spans.push([start, i, type]);
        start = null;
      }
    });
    if (start !== null) spans.push([start, layers.length, type]);
  });
  return spans.sort(bySpan);
}

/** The outermost of possibly nested spans, as a flat sequence can hold them (bilou.flatten_spans). */
export function flattenSpans(spans) {
  const order = (a, b) => a[0] - b[0] || b[1] - b[0] - (a[1] - a[0]) || (a[2] < b[2] ? -1 : a[2] > b[2] ? 1 : 0);
  const kept = [];
  let end = -1;
  for (const s of [...spans].sort(order)) {
    if (s[0] >= end) {
      kept.push(s);
      end = s[1];
    }
  }
  return kept;
}

// -- the decoder ---------------------------------------------------------------------------------

export const DECODERS = ["crf", "argmax", "bilou"];

/** How a model's word scores become tags (decode.Decoder): `kind`, the schema's `tags` and `scheme`,
 * the `transitions` {transitions, start, end} of crf and bilou, a bilou model's `entityTypes`,
 * and the span-score `temperature`. */
export class Decoder {
  constructor({ kind, tags, scheme, transitions = null, entityTypes = [], temperature = 1 }) {
    if (!DECODERS.includes(kind)) throw new Error(`decoder ${JSON.stringify(kind)} is not one of ${DECODERS.join(", ")}`);
    if ((kind === "crf" || kind === "bilou") && !transitions) throw new Error(`a ${kind} decoder needs its transitions`);
    Object.assign(this, { kind, tags, scheme, transitions, entityTypes, temperature });
  }

  get nested() {
    return this.kind === "bilou";
  }

  /** Tags, spans and span scores of one sentence of `n` words from its scores (a Float32Array of
   * n * T values, or n * E * 5 BILOU logits). */
  decode(scores, n, withScores) {
    if (this.kind === "bilou") return this.#bilou(scores, n, withScores);
    const T = this.tags.length;
    let ids;
    let probs = null;
    if (this.kind === "crf") {
      const { transitions, start, end } = this.transitions;
      ids = viterbi(scores, n, T, transitions, start, end);
      if (withScores) probs = crfMarginals(this.#atTemperature(scores), n, T, ...[transitions, start, end].map((a) => this.#atTemperature(a)));
    } else {
      ids = Array.from({ length: n }, (_, i) => argmax(scores, i * T, T));
      if (withScores) probs = softmax(this.#atTemperature(scores), T);
    }
    const tags = ids.map((i) => this.tags[i]);
    const spans = tagsToSpans(tags, this.scheme);
    const round = this.kind === "crf" ? same : f; // the CRF's marginals are float64, softmax's float32
    const spanScores = probs && spans.map(([s, e]) => mean(ids.slice(s, e).map((id, k) => probs[(s + k) * T + id]), round));
    return { tags, spans, scores: spanScores };
  }

  /** Scores divided by the temperature, in float32 as numpy divides a float32 array by a Python float. */
  #atTemperature(a) {
    const t = f(this.temperature);
    return Float32Array.from(a, (v) => v / t);
  }

  /** Per-type BILOU tag ids [n][E] (decode.Decoder.layers). */
  layers(logits, n) {
    const E = this.entityTypes.length;
    const emissions = logSoftmax(logits, 5);
    const { transitions, start, end } = this.transitions;
    const out = Array.from({ length: n }, () => new Array(E));
    for (let e = 0; e < E; e++) {
      const layer = new Float32Array(n * 5);
      for (let i = 0; i < n; i++) layer.set(emissions.subarray((i * E + e) * 5, (i * E + e) * 5 + 5), i * 5);
      viterbi(layer, n, 5, transitions, start, end).forEach((tag, i) => (out[i][e] = tag));
    }
    return out;
  }

  #bilou(logits, n, withScores) {
    const layers = this.layers(logits, n);
    const spans = spansFromLayers(layers, this.entityTypes);
    const tags = spansToTags(flattenSpans(spans), n, this.scheme);
    let spanScores = null;
    if (withScores) {
      const E = this.entityTypes.length;
      const probs = softmax(this.#atTemperature(logits), 5);
      spanScores = spans.map(([s, e, type]) => {
        const k = this.entityTypes.indexOf(type);
        const chosen = [];
        for (let i = s; i < e; i++) chosen.push(probs[(i * E + k) * 5 + layers[i][k]]);
        return mean(chosen, f);
      });
    }
    return { tags, spans, scores: spanScores };
  }
}

/** numpy's mean: the pairwise sum divided by the count, rounded by `round`. */
function mean(values, round) {
  return round(pairwiseSum(values, round) / values.length);
}
