#!/usr/bin/env node
// Serve a folder (a `distill-export --web` page) on loopback, compressed as a static host would
// serve it (brotli or gzip, by the browser's Accept-Encoding), for the browser tests, the benchmark
// and a look at the page:  node js/bin/serve.js FOLDER [--port 8000]
// Written here (Node's http and zlib, no dependency) because the static servers on npm (sirv,
// http-server) serve only files compressed beforehand, and the page's size is measured compressed.
import { createServer } from "node:http";
import { readFile, stat } from "node:fs/promises";
import path from "node:path";
import { brotliCompressSync, constants, gzipSync } from "node:zlib";

const TYPES = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".mjs": "text/javascript; charset=utf-8",
  ".json": "application/json",
  ".wasm": "application/wasm",
  ".onnx": "application/octet-stream",
  ".safetensors": "application/octet-stream",
};

// compressed once per file, version and encoding, for every server of the process (a static host
// compresses ahead of time; the 14 MB WASM takes seconds to compress)
const cache = new Map();

/** Start serving `dir`; resolves to the server once it listens (its URL in `server.url`). */
export async function serve(dir, { port = 0, host = "127.0.0.1" } = {}) {
  const root = path.resolve(dir);
  const server = createServer(async (req, res) => {
    let rel;
    try {
      rel = decodeURIComponent(new URL(req.url, "http://x").pathname);
    } catch {
      return res.writeHead(400).end("a malformed path");
    }
    const file = path.join(root, rel.endsWith("/") ? `${rel}index.html` : rel);
    if (!file.startsWith(root + path.sep)) return res.writeHead(403).end();
    let info;
    try {
      info = await stat(file);
      if (!info.isFile()) throw new Error("not a file");
    } catch {
      return res.writeHead(404).end(`${rel}: not found`);
    }
    const accepts = String(req.headers["accept-encoding"] ?? "");
    const encoding = /\bbr\b/.test(accepts) ? "br" : /\bgzip\b/.test(accepts) ? "gzip" : null;
    const key = `${file}\0${info.size}\0${info.mtimeMs}\0${encoding}`;
    if (!cache.has(key)) {
      const raw = await readFile(file);
      cache.set(
        key,
        encoding === "br"
          ? brotliCompressSync(raw, { params: { [constants.BROTLI_PARAM_QUALITY]: 9, [constants.BROTLI_PARAM_SIZE_HINT]: raw.length } })
          : encoding === "gzip"
            ? gzipSync(raw, { level: 9 })
            : raw,
      );
    }
    const body = cache.get(key);
    res.writeHead(200, {
      "content-type": TYPES[path.extname(file)] ?? "application/octet-stream",
      "content-length": body.length,
      "cache-control": "no-store",
      ...(encoding ? { "content-encoding": encoding } : {}),
    });
    res.end(body);
  });
  await new Promise((resolve) => server.listen(port, host, resolve));
  server.url = `http://${host}:${server.address().port}/`;
  return server;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const [dir, ...rest] = process.argv.slice(2);
  if (!dir) {
    console.error("usage: node js/bin/serve.js FOLDER [--port 8000]");
    process.exit(2);
  }
  const port = rest[0] === "--port" ? Number(rest[1]) : 8000;
  const server = await serve(dir, { port });
  console.log(`serving ${path.resolve(dir)} at ${server.url}`);
}
