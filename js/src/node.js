// The Node entry point: an export folder on disk, run by onnxruntime-node.
//
//   import { loadTagger } from "seqdistill-web";
//   const tagger = await loadTagger("student-web/");
//   console.log(await tagger.tag("Peter Blackburn visits Paris."));

import { readFile, realpath } from "node:fs/promises";
import path from "node:path";
import * as ort from "onnxruntime-node";
import { ExportError } from "./export.js";
import { openTagger } from "./tagger.js";

export * from "./index.js";

/** The files of a folder on disk; a file whose real path (links followed) leaves it is refused. */
export function folderSource(dir) {
  const root = path.resolve(dir);
  return {
    name: (rel) => path.join(root, rel),
    async read(rel) {
      const file = path.join(root, rel);
      try {
        const [real, top] = await Promise.all([realpath(file), realpath(root)]);
        if (!real.startsWith(top + path.sep)) throw new ExportError(`${file}: a link to a file outside ${root}; export the model again`);
        return new Uint8Array(await readFile(real));
      } catch (e) {
        if (e.code === "ENOENT") throw new ExportError(`${file}: missing; export the model again`);
        throw e;
      }
    },
  };
}

/** The Tagger of the export folder `dir`; `threads`: ONNX Runtime's intra-op threads (default 1). */
export async function loadTagger(dir, { threads = 1 } = {}) {
  return openTagger(folderSource(dir), ort, { intraOpNumThreads: threads, interOpNumThreads: 1 });
}
