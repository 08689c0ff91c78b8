// The Node entry point: an export folder on disk, run by onnxruntime-node.
//
//   import { loadTagger } from "seqdistill-web";
//   const tagger = await loadTagger("student-web/");
//   console.log(await tagger.tag("Peter Blackburn visits Paris."));

import { readFile } from "node:fs/promises";
import path from "node:path";
import * as ort from "onnxruntime-node";
import { ExportError } from "./export.js";
import { openTagger } from "./tagger.js";

export * from "./index.js";

/** The files of a folder on disk. */
export function folderSource(dir) {
  const root = path.resolve(dir);
  return {
    name: (rel) => path.join(root, rel),
    async read(rel) {
      try {
        return new Uint8Array(await readFile(path.join(root, rel)));
      } catch (e) {
        if (e.code === "ENOENT") throw new ExportError(`${path.join(root, rel)}: missing; export the model again`);
        throw e;
      }
    },
  };
}

/** The Tagger of the export folder `dir`; `threads`: ONNX Runtime's intra-op threads (default 1). */
export async function loadTagger(dir, { threads = 1 } = {}) {
  return openTagger(folderSource(dir), ort, { intraOpNumThreads: threads, interOpNumThreads: 1 });
}
