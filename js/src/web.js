// The page's entry point: an export folder served beside the page, run by onnxruntime-web's WASM
// backend. The page's import map names where "onnxruntime-web" and "@huggingface/tokenizers" are.
//
//   import { loadTagger } from "./seqdistill/web.js";
//   const tagger = await loadTagger(new URL("./", location.href));
//   const [sentence] = await tagger.tag("Peter Blackburn visits Paris.");

import * as ort from "onnxruntime-web";
import { ExportError } from "./export.js";
import { openTagger } from "./tagger.js";

export * from "./index.js";

/** The files of a folder at `base` (a URL; a folder, whether or not it ends in "/"), fetched. */
export function urlSource(base) {
  const root = new URL(base, globalThis.location?.href);
  if (!root.pathname.endsWith("/")) root.pathname += "/";
  return {
    name: (rel) => new URL(rel, root).href,
    async read(rel) {
      const url = new URL(rel, root);
      let response;
      try {
        response = await fetch(url);
      } catch (e) {
        throw new ExportError(`${url.href}: cannot be fetched (${e.message})`);
      }
      if (!response.ok) throw new ExportError(`${url.href}: ${response.status} ${response.statusText}; is the whole folder served?`);
      return new Uint8Array(await response.arrayBuffer());
    },
  };
}

/** The Tagger of the folder at `base`. `threads`: WASM threads (default 1; more need a page served
 * cross-origin isolated, with COOP and COEP headers). */
export async function loadTagger(base, { threads = 1 } = {}) {
  ort.env.wasm.numThreads = threads;
  return openTagger(urlSource(base), ort, { executionProviders: ["wasm"] });
}
