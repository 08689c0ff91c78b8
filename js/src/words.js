// Raw text to words with offsets: the words rules of seqdistill/corpora/words.py, ported.
//
// Python's `regex` classes, written out for JavaScript's `v` flag (each checked code point by code
// point against Python in test/golden.test.js):
//   \w  = [\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\p{Join_Control}]   (the regex module's Unicode \w)
//   \s  = \p{White_Space};  \d = \p{Nd};  \p{Han} = \p{Script=Han} (the script, not its extensions)
//   \X  (a grapheme cluster) = the first segment of Intl.Segmenter's grapheme granularity from there
//   (?m:^) = the text's start or just after "\n" (Python's MULTILINE knows no other line break)
//   str.isalpha() = \p{L}
// Offsets are UTF-16 code units, JavaScript's own string indices (Python's are code points:
// `codePointToUtf16` converts). Unicode versions differ between Python's `regex`, Node's ICU and a
// browser's: a character assigned in a newer version may be classed apart (none in the golden set).
// One grapheme rule differs too: `regex` joins a virama to the consonant after it even where no
// consonant comes before ("(्क" is one cluster there, two in Intl.Segmenter, which follows
// Unicode's rule GB9c); such text (a virama after punctuation or an emoji) splits into other words.
// The `mecab` rule is not ported: MeCab and its dictionary are not in the page. A model of that rule
// tags pre-split words only, and raw text is refused by name.

const CJK = String.raw`\p{Script=Han}\p{Script=Hiragana}\p{Script=Katakana}`;
const W = String.raw`\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\p{Join_Control}`;
const LETTERS = `[[${W}]--[${CJK}]]`;
const WORDLIKE = `${LETTERS}+(?:[\\-'.’]${LETTERS}+)*`;
const NOT_SPACE = String.raw`\P{White_Space}`; // then widened to its grapheme cluster
const CLITIC = String.raw`(?:['’](?:[sSmMdD]|[lL][lL]|[rR][eE]|[vV][eE])|[nN]['’][tT])`;

// The last alternative of both rules, a grapheme cluster, is the one named group `g`.
const DEFAULT_WORD = new RegExp(`[${CJK}]|${WORDLIKE}|(?<g>${NOT_SPACE})`, "gv");
const PTB_WORD = new RegExp(
  [
    `${CLITIC}(?!${LETTERS})`, // a clitic standing alone: "Germany 's"
    String.raw`(?:\p{L}\.){2,}(?!${LETTERS})`, // U.S., p.m.
    String.raw`\p{Lu}\.(?=\p{White_Space}+\p{Lu})`, // J. Smith
    String.raw`(?<![^\n])\p{Nd}+\.(?=\p{White_Space})`, // a list number opening a line
    String.raw`\p{Nd}+(?:[,\/:.]\p{Nd}+)+`, // 3,000  1/2  1:18.48
    String.raw`(?<![${W}.])\.\p{Nd}+`, // .500
    String.raw`-{2,}|\.{2,}`,
    WORDLIKE,
    `(?<g>${NOT_SPACE})`,
  ].join("|"),
  "gv",
);
/** The character classes of both rules, one code point each: what the golden test checks against
 * Python's `regex`, code point by code point. */
export const CLASSES = {
  letters: new RegExp(`^${LETTERS}$`, "v"),
  cjk: new RegExp(`^[${CJK}]$`, "v"),
  space: /^\p{White_Space}$/v,
  digit: /^\p{Nd}$/v,
  letter: /^\p{L}$/v,
  upper: /^\p{Lu}$/v,
};
const ENDS_IN_CLITIC = new RegExp(`${CLITIC}$`, "v");
const LETTER = /^\p{L}$/u;

export const RULES = ["default", "ptb", "mecab"];

const graphemes = new Intl.Segmenter("und", { granularity: "grapheme" });

/** The end of the grapheme cluster that starts at `i` (as Python's \X matched from there). */
function clusterEnd(text, i) {
  for (let width = 64; ; width *= 4) {
    const piece = text.slice(i, i + width); // a bounded piece: segmenting the rest of a 1 MB text each time is quadratic
    const first = graphemes.segment(piece)[Symbol.iterator]().next().value.segment;
    if (first.length < piece.length || i + width >= text.length) return i + first.length;
  }
}

function matches(regex, text) {
  const words = [];
  const offsets = [];
  regex.lastIndex = 0;
  let m;
  while ((m = regex.exec(text)) !== null) {
    const start = m.index;
    const end = m.groups?.g !== undefined ? clusterEnd(text, start) : start + m[0].length;
    regex.lastIndex = end;
    words.push(text.slice(start, end));
    offsets.push([start, end]);
  }
  return [words, offsets];
}

/** The code point that ends just before UTF-16 index `i`. */
function codePointBefore(text, i) {
  const low = text.charCodeAt(i - 1);
  if (low >= 0xdc00 && low <= 0xdfff && i >= 2) {
    const high = text.charCodeAt(i - 2);
    if (high >= 0xd800 && high <= 0xdbff) return text.slice(i - 2, i);
  }
  return text[i - 1];
}

function defaultWords(text) {
  return matches(DEFAULT_WORD, text);
}

function ptbWords(text) {
  const [, spans] = matches(PTB_WORD, text);
  const words = [];
  const offsets = [];
  for (const [start, stop] of spans) {
    let end = stop;
    const tail = []; // clitics split off the end, last first: "they'll've" -> they 'll 've
    for (;;) {
      const c = ENDS_IN_CLITIC.exec(text.slice(start, end));
      if (c === null || c.index === 0 || !LETTER.test(codePointBefore(text, start + c.index))) break;
      tail.push([start + c.index, end]);
      end = start + c.index;
    }
    for (const [a, b] of [[start, end], ...tail.reverse()]) {
      words.push(text.slice(a, b));
      offsets.push([a, b]);
    }
  }
  return [words, offsets];
}

export class WordsRuleError extends Error {}

/** The function that splits a text by `rule` into `[words, offsets]` (UTF-16 offsets). */
export function splitter(rule) {
  if (rule === "default") return defaultWords;
  if (rule === "ptb") return ptbWords;
  if (rule === "mecab") {
    return () => {
      throw new WordsRuleError(
        "this model splits raw text with MeCab (the mecab words rule), which does not run in JavaScript: " +
          "give it pre-split words (a list of words per sentence), or tag raw text with seqdistill in Python",
      );
    };
  }
  throw new WordsRuleError(`words rule ${JSON.stringify(rule)} is not one of ${RULES.join(", ")}`);
}

/** The text of pre-split words (joined by one space) and each word's offsets into it. */
export function joinWords(words) {
  const offsets = [];
  let pos = 0;
  for (const w of words) {
    offsets.push([pos, pos + w.length]);
    pos += w.length + 1;
  }
  return [words.join(" "), offsets];
}

/** A map from code point indices (Python's offsets) to UTF-16 indices of `text`. */
export function codePointToUtf16(text) {
  const at = [0];
  for (const ch of text) at.push(at[at.length - 1] + ch.length);
  return (i) => {
    if (i < 0 || i >= at.length) throw new RangeError(`code point offset ${i} is outside a text of ${at.length - 1}`);
    return at[i];
  };
}

/** The index of the first lone surrogate of `text`, or -1 (a well-formed text). */
export function loneSurrogate(text) {
  if (text.isWellFormed()) return -1;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c >= 0xd800 && c <= 0xdbff) {
      const d = text.charCodeAt(i + 1);
      if (d >= 0xdc00 && d <= 0xdfff) i++;
      else return i;
    } else if (c >= 0xdc00 && c <= 0xdfff) return i;
  }
  return -1;
}
