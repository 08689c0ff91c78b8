// What both entry points (node.js, web.js) export besides their own loadTagger.
export { Decoder, crfMarginals, flattenSpans, spansFromLayers, spansToTags, tagsToSpans, viterbi } from "./decode.js";
export { ExportError, readSafetensors, sha256 } from "./export.js";
export { InputError, Tagger, lengthBatches, openTagger, sentences } from "./tagger.js";
export { RULES, WordsRuleError, codePointToUtf16, joinWords, loneSurrogate, splitter } from "./words.js";
