// The Tagger of an exported student (or teacher): seqdistill/inference/tagger.py, ported. Raw texts
// or pre-split words in; words, UTF-16 offsets, tags and spans with scores out, the answers of
// Python's `Tagger` on the same folder. The runtime (onnxruntime-web or onnxruntime-node) and the
// folder's reader are given by the entry point (web.js, node.js).

import { Tokenizer } from "@huggingface/tokenizers";
import { Decoder } from "./decode.js";
import { ExportError, checkedFile, checkedJson, readMeta, readSafetensors, wordHashing, wordList } from "./export.js";
import { WordPieces, bagInputs, poolTokens, subwordInputs, teacherSegments, windowInputs } from "./inputs.js";
import { joinWords, loneSurrogate, splitter } from "./words.js";

/** Bad input to `tag` or `documents`, naming the input and the position. */
export class InputError extends Error {}

function refuseLoneSurrogates(where, text) {
  const bad = loneSurrogate(text);
  if (bad >= 0) {
    throw new InputError(
      `${where}: a lone surrogate (U+${text.charCodeAt(bad).toString(16).toUpperCase()}) at offset ${bad}, ` +
        "half of a character; the text was cut inside a character or is not valid Unicode",
    );
  }
}

/** Open the folder `source` with the ONNX Runtime module `ort` and its session `options`. */
export async function openTagger(source, ort, options = {}) {
  const { meta, web } = await readMeta(source);
  // every file at once: the page's load time is its longest fetch, not their sum
  const [transitions, temperature, tokenizer, graph, wordRows] = await Promise.all([
    decodingTables(source, meta),
    "calibration.json" in meta.files ? checkedJson(source, meta, "calibration.json").then((c) => Number(c.temperature)) : 1,
    Promise.all([checkedJson(source, meta, "tokenizer/tokenizer.json"), checkedJson(source, meta, "tokenizer/tokenizer_config.json")]),
    checkedFile(source, meta, meta.onnx),
    meta.word_vectors ? wordList(source, meta) : meta.word_hashing ? wordHashing(source, meta) : null,
  ]);
  if (!(temperature > 0)) throw new ExportError(`${source.name("calibration.json")}: temperature ${temperature} must be positive`);
  const schema = meta.label_schema;
  const decoder = named(source.name("export.json"), () =>
    new Decoder({ kind: meta.decoder, tags: schema.tags, scheme: schema.scheme, transitions, entityTypes: meta.entity_types ?? [], temperature }),
  );
  let session;
  try {
    session = await ort.InferenceSession.create(graph, {
      graphOptimizationLevel: "all",
      // decision (onnx_runtime.session_options): the int8 weights' DequantizeLinear folded once, at load
      extra: { session: { disable_quant_qdq: "1" } },
      ...options,
    });
  } catch (e) {
    throw new ExportError(`${source.name(meta.onnx)}: ONNX Runtime cannot load it (${String(e.message ?? e).slice(0, 200)})`);
  }
  const reader = named(source.name("tokenizer/tokenizer.json"), () => new Tokenizer(...tokenizer));
  return new Tagger({ meta, web, decoder, tokenizer: reader, session, ort, wordRows });
}

/** `make()`, its error named by `where` and made an ExportError. */
function named(where, make) {
  try {
    return make();
  } catch (e) {
    throw new ExportError(`${where}: ${e.message}; export the model again`);
  }
}

/** A crf or bilou decoder's transitions, start and end scores (decode.safetensors), checked. */
async function decodingTables(source, meta) {
  if (meta.decoder !== "crf" && meta.decoder !== "bilou") return null;
  const where = source.name("decode.safetensors");
  const t = readSafetensors(await checkedFile(source, meta, "decode.safetensors"), where);
  const n = meta.decoder === "bilou" ? 5 : meta.label_schema.tags.length;
  if (!t.transitions || t.transitions.data.length !== n * n || t.start?.data.length !== n || t.end?.data.length !== n) {
    throw new ExportError(`${where}: the transitions do not fit ${n} tags; export the model again`);
  }
  return { transitions: t.transitions.data, start: t.start.data, end: t.end.data };
}

/** The indices of the non-empty sentences, shortest first, in batches of at most `batchSize`, none
 * padded past twice its own length (tagger.length_batches). */
export function lengthBatches(lengths, batchSize) {
  const order = lengths.map((n, i) => i).filter((i) => lengths[i] > 0);
  order.sort((a, b) => lengths[a] - lengths[b] || a - b);
  const batches = [];
  for (const i of order) {
    const last = batches[batches.length - 1];
    if (!last || last.length === batchSize || lengths[i] > 2 * lengths[last[0]]) batches.push([]);
    batches[batches.length - 1].push(i);
  }
  return batches;
}

export class Tagger {
  constructor({ meta, web, decoder, tokenizer, session, ort, wordRows = null }) {
    Object.assign(this, { meta, web, decoder, session, ort, wordRows });
    this.words = meta.words ?? "default";
    this.pieces = new WordPieces(tokenizer, web.tokenizer.unk_id);
    for (const [word, pieces] of Object.entries(web.tokenizer.probe ?? {})) {
      const mine = this.pieces.word(word);
      if (mine.join() !== pieces.join()) {
        throw new ExportError(
          `tokenizer/tokenizer.json: tokenizers.js gives ${JSON.stringify(word)} the pieces [${mine}], Python gave ` +
            `[${pieces}] (web.json's probe); this tokenizer does not run in the page as it runs in Python`,
        );
      }
    }
  }

  get entityTypes() {
    return this.meta.label_schema.entity_types;
  }

  /** Tag texts (split by the model's words rule) or pre-split sentences (arrays of words, whose text
   * is the words joined by one space). Offsets are UTF-16 code units into each text. */
  async tag(inputs, { batchSize = 32, scores = true, minScore = null } = {}) {
    if (typeof inputs === "string") inputs = [inputs];
    const split = splitter(this.words);
    const items = inputs.map((item, i) => {
      if (typeof item === "string") {
        refuseLoneSurrogates(`input ${i}`, item);
        const [words, offsets] = split(item);
        return { text: item, words, offsets };
      }
      if (Array.isArray(item) && item.every((w) => typeof w === "string")) {
        item.forEach((w, j) => refuseLoneSurrogates(`input ${i}, word ${j}`, w));
        const [text, offsets] = joinWords(item);
        return { text, words: [...item], offsets };
      }
      throw new InputError(`input ${i}: a text (string) or a list of words (array of strings), not ${typeof item}`);
    });
    return this.#tagged(items, { batchSize, scores, minScore });
  }

  /** Texts already split into words ({text, words, offsets}) tagged, with their spans. */
  async #tagged(items, { batchSize, scores, minScore }) {
    const decoded = await this.decode(items.map((x) => x.words), batchSize, scores || minScore !== null);
    return items.map(({ text, words, offsets }, i) => {
      const d = decoded[i];
      let spans = d.spans.map(([s, e, type], j) => ({
        type,
        start: s,
        end: e,
        char_start: offsets[s][0],
        char_end: offsets[e - 1][1],
        text: text.slice(offsets[s][0], offsets[e - 1][1]),
        score: d.scores ? d.scores[j] : null,
      }));
      let tags = d.tags;
      if (minScore !== null) {
        const dropped = spans.filter((sp) => sp.score !== null && sp.score < minScore);
        spans = spans.filter((sp) => sp.score === null || sp.score >= minScore);
        if (dropped.length && !this.decoder.nested) {
          tags = [...tags];
          for (const sp of dropped) tags.fill("O", sp.start, sp.end);
        }
      }
      return { text, words, offsets, tags, spans };
    });
  }

  /** Decoded sentences in input order, run in batches of similar length; an empty one gets nothing. */
  async decode(sentences, batchSize, withScores) {
    const out = sentences.map(() => ({ tags: [], spans: [], scores: withScores ? [] : null }));
    for (const idx of lengthBatches(sentences.map((s) => s.length), batchSize)) {
      const batch = idx.map((i) => sentences[i]);
      const { data, W, perWord } = await this.scores(batch);
      idx.forEach((i, b) => {
        const n = batch[b].length;
        out[i] = this.decoder.decode(data.subarray(b * W * perWord, (b * W + n) * perWord), n, withScores);
      });
    }
    return out;
  }

  /** Word scores of a batch: `data` [B, W, perWord] flat (W its most words; perWord T, or E x 5 BILOU logits). */
  async scores(batch) {
    const meta = this.meta;
    const pieces = this.pieces.sentences(batch);
    const W = batch.reduce((m, w) => Math.max(m, w.length), 0);
    let feed;
    let framing = null; // segments: each token's word slot and weight, to pool token scores to words
    if (meta.inputs === "bags") feed = bagInputs(pieces, batch, Boolean(meta.chars), this.wordRows);
    else if (meta.inputs === "subwords") feed = subwordInputs(pieces, batch, meta.pooling ?? "first");
    else {
      framing =
        meta.framing === "teacher"
          ? teacherSegments(pieces, batch, {
              maxLength: Number(meta.max_length),
              pooling: meta.pooling ?? "first",
              prefix: this.web.tokenizer.prefix,
              suffix: this.web.tokenizer.suffix,
              padId: this.web.tokenizer.pad_id,
            })
          : windowInputs(pieces, batch, Number(meta.window), Number(meta.cls_token_id), Number(meta.sep_token_id));
      feed = framing.feed;
    }
    const tensors = {};
    for (const [name, [type, data, dims]] of Object.entries(feed)) tensors[name] = new this.ort.Tensor(type, data, dims);
    const result = await this.session.run(tensors);
    const out = result.scores;
    const perWord = out.dims.slice(2).reduce((a, b) => a * b, 1);
    const data = framing ? poolTokens(out.data, perWord, framing.slot, framing.weight, batch.length, W) : out.data;
    return { data, W, perWord };
  }

  /** Tag whole documents: each split into sentences (`sentences`), every sentence tagged in batches
   * with `onProgress(done, total)` after each batch and the event loop let in between, so a page
   * stays responsive over a long text; offsets into the document. */
  async documents(texts, { batchSize = 32, scores = true, minScore = null, maxWords = 256, onProgress = null } = {}) {
    if (typeof texts === "string") texts = [texts];
    texts.forEach((t, d) => {
      if (typeof t !== "string") throw new InputError(`document ${d}: a text (string), not ${typeof t}`);
      refuseLoneSurrogates(`document ${d}`, t);
    });
    const owners = texts.flatMap((text, d) => sentencePieces(text, this.words, maxWords).map((p) => [d, p]));
    const docs = texts.map((text) => ({ text, sentences: [], spans: [] }));
    const chunk = Math.max(batchSize, 1) * 4;
    for (let k = 0; k < owners.length; k += chunk) {
      const part = owners.slice(k, k + chunk);
      const items = part.map(([d, piece]) => {
        const text = texts[d].slice(piece.start, piece.end);
        if (piece.words === null) splitter(this.words)(text); // mecab: refused there, by name
        return { text, words: piece.words, offsets: piece.offsets };
      });
      const tagged = await this.#tagged(items, { batchSize, scores, minScore });
      part.forEach(([d, { start }], j) => {
        const s = tagged[j];
        s.offsets = s.offsets.map(([a, b]) => [a + start, b + start]);
        for (const sp of s.spans) {
          sp.char_start += start;
          sp.char_end += start;
        }
        docs[d].sentences.push(s);
        docs[d].spans.push(...s.spans);
      });
      onProgress?.(Math.min(k + chunk, owners.length), owners.length);
      await new Promise((resolve) => setTimeout(resolve, 0));
    }
    return docs;
  }
}

const sentenceSegmenter = new Intl.Segmenter("en", { granularity: "sentence" });
// A segment that ends in one of these does not end a sentence: letters with periods ("U.S.", "e.g."),
// an initial ("J."), or a title or other abbreviation that comes before a name or a number.
const ABBREVIATION = /(?:^|[\s(])(?:(?:\p{L}\.){2,}|\p{Lu}\.|(?:Mr|Mrs|Ms|Dr|Prof|St|Jr|Sr|Gen|Gov|Sen|Rep|Col|Lt|Capt|Sgt|Mt|No|vs)\.)$/u;

/** [start, end] UTF-16 spans of a document's sentences, without their surrounding whitespace.
 * The rule, named here (Python's documents are split by pysbd, which has no JavaScript port): a
 * line break always ends a sentence (as seqdistill's splitters read it); within a line,
 * Intl.Segmenter's sentences (Unicode's sentence boundaries, UAX #29), joined again after an
 * abbreviation (`ABBREVIATION`), where UAX #29 cuts and pysbd does not ("Mr. Smith", "the U.S.
 * Department"); pysbd knows many more abbreviations and rules (docs/RESULTS.md measures how often the
 * two agree). A sentence of more than `maxWords` words is cut every `maxWords` words, so that no single
 * input is unbounded. */
export function sentences(text, rule = "default", maxWords = 256) {
  return sentencePieces(text, rule, maxWords).map(({ start, end }) => [start, end]);
}

/** The sentences of `sentences`, each {start, end, words, offsets} with its words by `rule` (offsets
 * into the sentence: what `Tagger.tag` would make of its text), so that a document's words are split
 * once; `words` is null under `mecab`, which does not run here. */
function sentencePieces(text, rule, maxWords) {
  const out = [];
  const lineBreak = /\r\n|[\n\r\v\f\x1c-\x1e\x85\u2028\u2029]/g;
  const ends = [...text.matchAll(lineBreak)].map((m) => [m.index, m.index + m[0].length]);
  let from = 0;
  for (const [lineEnd, next] of [...ends, [text.length, text.length]]) {
    let open = null; // the start of a sentence that an abbreviation kept open
    for (const [segment, index] of segments(text.slice(from, lineEnd))) {
      const start = open ?? from + index;
      const end = from + index + segment.length;
      open = null;
      if (ABBREVIATION.test(segment.trimEnd()) && end < lineEnd) {
        open = start;
        continue;
      }
      out.push(...trimmed(text, start, end, rule, maxWords));
    }
    from = next;
  }
  return out;
}

/** Intl.Segmenter's sentences of `line` as [segment, index], read a bounded window at a time: V8
 * walks a long string's sentences in quadratic time (36,000 sentences, 1 MB: 40 s at once; windows
 * of 4,096 characters: a fraction of a second). A window's last segment may be cut by the window, so
 * the next window starts there; a sentence longer than a window widens it. */
export function* segments(line, width = 4096) {
  let pos = 0;
  while (pos < line.length) {
    const piece = line.slice(pos, pos + width);
    const found = [...sentenceSegmenter.segment(piece)];
    const whole = pos + width >= line.length;
    if (found.length === 1 && !whole) {
      width *= 2; // one sentence longer than the window
      continue;
    }
    const keep = whole ? found : found.slice(0, -1);
    for (const { segment, index } of keep) yield [segment, pos + index];
    pos += whole ? piece.length : found[found.length - 1].index;
  }
}

function trimmed(text, start, end, rule, maxWords) {
  const piece = text.slice(start, end);
  const lead = piece.length - piece.trimStart().length;
  const trail = piece.trimEnd().length;
  return trail > lead ? cut(text, start + lead, start + trail, rule, maxWords) : [];
}

function cut(text, start, end, rule, maxWords) {
  if (rule === "mecab") return [{ start, end, words: null, offsets: null }];
  const split = splitter(rule);
  const [words, offsets] = split(text.slice(start, end));
  if (offsets.length <= maxWords) return [{ start, end, words, offsets }];
  const pieces = [];
  for (let k = 0; k < offsets.length; k += maxWords) {
    const [a, b] = [start + offsets[k][0], start + offsets[Math.min(k + maxWords, offsets.length) - 1][1]];
    const [w, o] = split(text.slice(a, b)); // a piece's words, as its own text splits (rare: over maxWords)
    pieces.push({ start: a, end: b, words: w, offsets: o });
  }
  return pieces;
}
