// An export folder (`distill-export --web`, or any `distill-export` directory) read and checked, as
// seqdistill/inference/onnx_runtime.py reads it: export.json, the sha256 of every file it reads, the
// decoding tables. `source.read(path)` gives a file's bytes (from disk in Node, by fetch in a page).

export const EXPORT_FORMAT = "seqdistill-export";
export const EXPORT_VERSION = 2;
export const WEB_FORMAT = "seqdistill-web";
export const WEB_VERSION = 1;

/** An export folder that cannot be used, naming the file and what to do. */
export class ExportError extends Error {}

const decoder = new TextDecoder("utf-8", { fatal: true });

export async function sha256(bytes) {
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", bytes));
  return Array.from(digest, (b) => b.toString(16).padStart(2, "0")).join("");
}

async function readJson(source, path) {
  const bytes = await source.read(path);
  try {
    return JSON.parse(decoder.decode(bytes));
  } catch (e) {
    throw new ExportError(`${source.name(path)}: not valid JSON (${e.message}); export the model again`);
  }
}

function safePath(source, path, field) {
  if (typeof path !== "string" || path.startsWith("/") || path.split("/").includes("..") || path.includes("\\")) {
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
  if (!["bags", "subwords", "segments"].includes(meta.inputs)) {
    throw new ExportError(`${where}: inputs ${JSON.stringify(meta.inputs)} is not one of bags, subwords, segments`);
  }
  safePath(source, meta.onnx, "onnx");
  for (const rel of Object.keys(meta.files ?? {})) safePath(source, rel, "files");
  const web = await readJson(source, "web.json");
  if (web?.format !== WEB_FORMAT) {
    throw new ExportError(`${source.name("web.json")}: not a seqdistill web export; run distill-export --web again`);
  }
  if (web.format_version > WEB_VERSION) {
    throw new ExportError(
      `${source.name("web.json")}: web format version ${web.format_version} is newer than this runtime reads (${WEB_VERSION})`,
    );
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

export async function checkedJson(source, meta, path) {
  const bytes = await checkedFile(source, meta, path);
  return JSON.parse(decoder.decode(bytes));
}

/** The float32 tensors of a safetensors file: an 8-byte little-endian header length, a JSON
 * header {name: {dtype, shape, data_offsets}}, then the data (huggingface/safetensors' format).
 * Read by hand: it is these few lines, and the maintained readers are Python and Rust. */
export function readSafetensors(bytes, where) {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const size = Number(view.getBigUint64(0, true));
  if (8 + size > bytes.byteLength) throw new ExportError(`${where}: not a safetensors file (header past its end)`);
  const header = JSON.parse(decoder.decode(bytes.subarray(8, 8 + size)));
  const out = {};
  for (const [name, t] of Object.entries(header)) {
    if (name === "__metadata__") continue;
    if (t.dtype !== "F32") throw new ExportError(`${where}: tensor ${name} is ${t.dtype}, the decoding tables are F32`);
    const [a, b] = t.data_offsets;
    const data = bytes.slice(8 + size + a, 8 + size + b); // a copy: aligned for Float32Array
    out[name] = { data: new Float32Array(data.buffer, data.byteOffset, (b - a) / 4), shape: t.shape };
  }
  return out;
}
