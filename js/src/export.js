// An export folder (`distill-export --web`, or any `distill-export` directory) read and checked, as
// seqdistill/inference/onnx_runtime.py reads it: export.json, the sha256 of every file it reads, the
// decoding tables. `source.read(path)` gives a file's bytes (from disk in Node, by fetch in a page).

import { WordHashing } from "./inputs.js";

export const EXPORT_FORMAT = "seqdistill-export";
// 3: a student's word vectors (`word_vectors`: their word list); 4: a hashed word table (`word_hashing`); 5: the
// hashed table fed each distinct word of a batch once (onnx_runtime.EXPORT_VERSION)
export const EXPORT_VERSION = 5;
export const WEB_FORMAT = "seqdistill-web";
export const WEB_VERSION = 1;

/** An export folder that cannot be used, naming the file and what to do. */
export class ExportError extends Error {}

const decoder = new TextDecoder("utf-8", { fatal: true });

export async function sha256(bytes) {
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", bytes));
  return Array.from(digest, (b) => b.toString(16).padStart(2, "0")).join("");
}

function parseJson(source, path, bytes) {
  try {
    return JSON.parse(decoder.decode(bytes));
  } catch (e) {
    throw new ExportError(`${source.name(path)}: not valid JSON (${e.message}); export the model again`);
  }
}

async function readJson(source, path) {
  return parseJson(source, path, await source.read(path));
}

// A file of the folder: plain names joined by "/", nothing that a URL or a file system would read as
// a scheme, a query, an escape, a parent or the root ("%2e%2e/", "https://...", "/etc/...").
const FOLDER_PATH = /^[A-Za-z0-9_.-]+(?:\/[A-Za-z0-9_.-]+)*$/;

function safePath(source, path, field) {
  if (typeof path !== "string" || !FOLDER_PATH.test(path) || path.split("/").some((p) => p === ".." || p === ".")) {
    throw new ExportError(`${source.name("export.json")}: ${field} ${JSON.stringify(path)} names a file outside the folder`);
  }
  return path;
}

/** export.json and web.json, checked as onnx_runtime.read_export_json checks them. */
export async function readMeta(source) {
  const meta = await readJson(source, "export.json");
  const where = source.name("export.json");
  if (meta === null || typeof meta !== "object" || meta.format !== EXPORT_FORMAT) {
    throw new ExportError(`${where}: not a seqdistill export (format ${JSON.stringify(meta?.format ?? null)})`);
  }
  if ((meta.format_version ?? 0) > EXPORT_VERSION) {
    throw new ExportError(
      `${where}: format version ${meta.format_version} is newer than this runtime reads (${EXPORT_VERSION}); ` +
        "export the page again with this seqdistill, or upgrade the page's runtime",
    );
  }
  for (const key of ["onnx", "onnx_sha256", "inputs", "decoder", "label_schema", "kind", "model", "files"]) {
    if (!(key in meta)) throw new ExportError(`${where}: field ${JSON.stringify(key)} is missing; export the model again`);
  }
  if (typeof meta.files !== "object" || meta.files === null || Array.isArray(meta.files)) {
    throw new ExportError(`${where}: field "files" is not a map of files to their sha256; export the model again`);
  }
  if (!["bags", "subwords", "segments"].includes(meta.inputs)) {
    throw new ExportError(`${where}: inputs ${JSON.stringify(meta.inputs)} is not one of bags, subwords, segments`);
  }
  safePath(source, meta.onnx, "onnx");
  if (meta.word_vectors !== undefined) safePath(source, meta.word_vectors?.file, "word_vectors.file");
  for (const rel of Object.keys(meta.files)) safePath(source, rel, "files");
  if (!("web.json" in meta.files)) {
    throw new ExportError(`${where}: no checksum of web.json; not a web folder: run distill-export --web again`);
  }
  const webWhere = source.name("web.json");
  const web = await checkedJson(source, meta, "web.json");
  if (web?.format !== WEB_FORMAT) throw new ExportError(`${webWhere}: not a seqdistill web export; run distill-export --web again`);
  if (web.format_version > WEB_VERSION) {
    throw new ExportError(`${webWhere}: web format version ${web.format_version} is newer than this runtime reads (${WEB_VERSION})`);
  }
  const t = web.tokenizer;
  const ids = (v) => Array.isArray(v) && v.every(Number.isInteger);
  if (!t || !Number.isInteger(t.unk_id) || !Number.isInteger(t.pad_id) || !ids(t.prefix) || !ids(t.suffix) || typeof t.probe !== "object" || t.probe === null) {
    throw new ExportError(`${webWhere}: "tokenizer" lacks unk_id, pad_id, prefix, suffix or probe; run distill-export --web again`);
  }
  return { meta, web };
}

/** A file's bytes, refused unless its sha256 is the one export.json records. */
export async function checkedFile(source, meta, path) {
  const expected = path === meta.onnx ? meta.onnx_sha256 : meta.files[path];
  if (expected === undefined) {
    throw new ExportError(`${source.name("export.json")}: no checksum of ${path}, so it cannot be checked; export the model again`);
  }
  const bytes = await source.read(safePath(source, path, "file"));
  if ((await sha256(bytes)) !== expected) {
    throw new ExportError(`${source.name(path)}: damaged (its sha256 is not the one export.json records); export the model again`);
  }
  return bytes;
}

/** The lookup of a student's word vector table (onnx_runtime.read_word_list): its word list, a word
 * a line, row 1 first, checked against its sha256 and the table's rows. */
export async function wordList(source, meta) {
  const spec = meta.word_vectors;
  const where = source.name(spec.file);
  let words;
  try {
    words = decoder.decode(await checkedFile(source, meta, spec.file)).split("\n");
  } catch (e) {
    if (e instanceof ExportError) throw e;
    throw new ExportError(`${where}: not UTF-8 (${e.message}); export the model again`);
  }
  const rows = new Map(words.map((w, i) => [w, i + 1]));
  if (words.length !== spec.rows || rows.size !== words.length) {
    throw new ExportError(`${where}: ${words.length} lines (${rows.size} distinct words) for a table of ${spec.rows} rows; export the model again`);
  }
  return rows;
}

/** The hashing of a student's hashed word table (onnx_runtime.read_word_hashing): refused unless this
 * runtime gives the probe words (tokenization.HASH_PROBE) the rows the exporter gave them. */
export async function wordHashing(source, meta) {
  const spec = meta.word_hashing;
  const where = source.name("export.json");
  const ints = ["rows", "minn", "maxn", "hashes"].every((k) => Number.isInteger(spec?.[k]) && spec[k] >= 1);
  if ((meta.format_version ?? 0) < 5) {
    throw new ExportError(
      `${where}: a hashed word table of format ${meta.format_version}, whose graph takes every word's rows padded to ` +
        "[B, L, K]; this runtime feeds each distinct word once (format 5): export the model again with this version",
    );
  }
  if (!ints || spec.hash !== "fnv1a-32") throw new ExportError(`${where}: word_hashing is not a hashing this runtime reads`);
  const hashing = new WordHashing(spec);
  const rows = HASH_PROBE.map((w) => hashing.wordRows(w).join(",")).join(";");
  if ((await sha256(new TextEncoder().encode(rows))) !== spec.fingerprint) {
    throw new ExportError(`${where}: word_hashing's fingerprint is not this runtime's: the export's words would find other rows than in training; export the model again`);
  }
  return hashing;
}

// the words whose rows an export's word_hashing fingerprints (tokenization.HASH_PROBE, the same words)
export const HASH_PROBE = ["Paris", "tsvangirai", "É", "Straße", "İstanbul", "日本語", "x", "don't", "2026"];

export async function checkedJson(source, meta, path) {
  return parseJson(source, path, await checkedFile(source, meta, path));
}

/** The float32 tensors of a safetensors file: an 8-byte little-endian header length, a JSON
 * header {name: {dtype, shape, data_offsets}}, then the data (huggingface/safetensors' format).
 * Read by hand: it is these few lines, and the maintained readers are Python and Rust. */
export function readSafetensors(bytes, where) {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const size = bytes.byteLength >= 8 ? Number(view.getBigUint64(0, true)) : Infinity;
  if (8 + size > bytes.byteLength) throw new ExportError(`${where}: not a safetensors file (header past its end)`);
  let header;
  try {
    header = JSON.parse(decoder.decode(bytes.subarray(8, 8 + size)));
  } catch (e) {
    throw new ExportError(`${where}: not a safetensors file (its header: ${e.message})`);
  }
  const out = {};
  for (const [name, t] of Object.entries(header)) {
    if (name === "__metadata__") continue;
    if (t.dtype !== "F32") throw new ExportError(`${where}: tensor ${name} is ${t.dtype}, the decoding tables are F32`);
    const [a, b] = t.data_offsets;
    if (!(Number.isInteger(a) && Number.isInteger(b) && 0 <= a && a <= b && 8 + size + b <= bytes.byteLength && (b - a) % 4 === 0)) {
      throw new ExportError(`${where}: tensor ${name}'s data_offsets ${JSON.stringify(t.data_offsets)} do not fit the file`);
    }
    const data = bytes.slice(8 + size + a, 8 + size + b); // a copy: aligned for Float32Array
    out[name] = { data: new Float32Array(data.buffer, data.byteOffset, (b - a) / 4), shape: t.shape };
  }
  return out;
}
