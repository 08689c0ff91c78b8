// Compare a runtime's answers with the golden answers of Python's Tagger (golden.json: inputs and
// answers, offsets in Python's code points): every word, tag, span and UTF-16 offset equal, every
// score within 1e-4. Returns a list of differences (empty: the same answers).
import { cp, mkdtemp, readdir, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { codePointToUtf16 } from "../src/words.js";

export const SCORE_TOLERANCE = 1e-4;

export function compareAnswers(golden, answers) {
  const diffs = [];
  golden.answers.forEach((want, i) => {
    const got = answers[i];
    const at = codePointToUtf16(want.text);
    const where = `input ${i} (${JSON.stringify(want.text.slice(0, 40))})`;
    const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);
    if (got.text !== want.text) diffs.push(`${where}: text ${JSON.stringify(got.text)}`);
    if (!same(got.words, want.words)) diffs.push(`${where}: words ${JSON.stringify(got.words)} != ${JSON.stringify(want.words)}`);
    const offsets = want.offsets.map(([a, b]) => [at(a), at(b)]);
    if (!same(got.offsets, offsets)) diffs.push(`${where}: offsets ${JSON.stringify(got.offsets)} != ${JSON.stringify(offsets)}`);
    if (!same(got.tags, want.tags)) diffs.push(`${where}: tags ${JSON.stringify(got.tags)} != ${JSON.stringify(want.tags)}`);
    const spans = want.spans.map((s) => [s.type, s.start, s.end, at(s.char_start), at(s.char_end), s.text]);
    const gotSpans = got.spans.map((s) => [s.type, s.start, s.end, s.char_start, s.char_end, s.text]);
    if (!same(gotSpans, spans)) diffs.push(`${where}: spans ${JSON.stringify(gotSpans)} != ${JSON.stringify(spans)}`);
    else {
      want.spans.forEach((s, j) => {
        const d = Math.abs((got.spans[j].score ?? NaN) - s.score);
        if (!(d <= SCORE_TOLERANCE)) diffs.push(`${where}: span ${j} score ${got.spans[j].score} != ${s.score}`);
      });
    }
  });
  return diffs;
}

/** The largest difference between a span score and Python's, over spans that match. */
export function largestScoreDifference(golden, answers) {
  let most = 0;
  golden.answers.forEach((want, i) =>
    want.spans.forEach((s, j) => {
      const got = answers[i].spans[j];
      if (got && got.start === s.start && got.end === s.end && got.type === s.type) most = Math.max(most, Math.abs(got.score - s.score));
    }),
  );
  return most;
}

/** The fixture folders under `dir` (each a web folder with its golden.json), by name. */
export async function fixtures(dir) {
  const names = (await readdir(dir, { withFileTypes: true })).filter((e) => e.isDirectory()).map((e) => e.name);
  return names.sort().map((name) => path.join(dir, name));
}

/** A copy of the folder `dir` in a new temporary directory, changed by `edit(copy)`; the directory
 * is removed when the test `t` (node:test's context) ends, whether it passed or not. */
export async function brokenCopy(t, dir, edit) {
  const scratch = await mkdtemp(path.join(os.tmpdir(), "web-"));
  t.after(() => rm(scratch, { recursive: true, force: true }));
  const copy = path.join(scratch, "m");
  await cp(dir, copy, { recursive: true });
  await edit(copy);
  return copy;
}
