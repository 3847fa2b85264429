// The structured-output mask oracle: xgrammar (npm @mlc-ai/web-xgrammar, its WebAssembly build)
// replays the token walks that tests/unit/test_structured_oracle.cpp recorded with our grammar
// engine, and compares its next-token bitmask with ours before every token.
//   node xgrammar_oracle.cjs walks.json   -> prints a JSON report; exit 0 when every mask agrees
// The input: {tokenizer_json, vocab_size, eos, cases: [{name, kind, text, tokens: [ids],
// masks: [base64 of little-endian uint32 words, one before each token and one after the last]}]}.
// kind: json_schema (xgrammar: any_whitespace off, one line, separators ", " and ": ", strict),
// json_object (the schema {"type": "object"} in the same form), ebnf (the same grammar text),
// regex (xgrammar's structural tag of type regex).
// Special tokens are given to xgrammar as "" (it leaves empty tokens out of every mask), as our
// vocabulary leaves them out; EOS is its stop token, as ours.
// One known difference is counted apart, not as a disagreement: xgrammar's UTF-8 decoding takes
// the bytes C0, C1 and F5-FF as lead bytes and does not check the second byte after E0, ED, F0
// or F4, so inside a string it allows tokens that make the output invalid UTF-8 (overlong forms,
// surrogates, code points past U+10FFFF); ours refuses them. The check follows the walk's bytes.
"use strict";
const fs = require("fs");
const path = require("path");

// The package's bundle is UMD but declares "type": "module", so Node's loaders refuse it; run the
// bundle as CommonJS by hand.
function loadXgrammar() {
  const file = require.resolve("@mlc-ai/web-xgrammar/lib/index.js", {
    paths: [path.join(__dirname, "../../third_party/tokenizers"), process.cwd()],
  });
  const m = { exports: {} };
  new Function("exports", "module", "require", "__filename", "__dirname", fs.readFileSync(file, "utf8"))(
    m.exports, m, require, file, path.dirname(file));
  return m.exports;
}

function encodedVocab(tokenizerJson, vocabSize) {
  const tj = JSON.parse(fs.readFileSync(tokenizerJson, "utf8"));
  const vocab = new Array(vocabSize).fill("");
  for (const [token, id] of Object.entries(tj.model.vocab)) if (id < vocabSize) vocab[id] = token;
  for (const added of tj.added_tokens || []) {
    if (added.id < vocabSize) vocab[added.id] = added.special ? "" : added.content;
  }
  return vocab;
}

// GPT-2's byte <-> character table (byte-level BPE), to see a token's bytes.
const byteOfChar = (() => {
  const bs = [];
  for (let b = 33; b <= 126; ++b) bs.push(b);
  for (let b = 161; b <= 172; ++b) bs.push(b);
  for (let b = 174; b <= 255; ++b) bs.push(b);
  const cs = bs.slice();
  let n = 0;
  for (let b = 0; b < 256; ++b) if (!bs.includes(b)) { bs.push(b); cs.push(256 + n); ++n; }
  const map = new Map();
  bs.forEach((b, i) => map.set(String.fromCodePoint(cs[i]), b));
  return map;
})();

function tokenBytes(token) {
  const out = [];
  for (const ch of token) {
    const b = byteOfChar.get(ch);
    if (b === undefined) return null;  // not a byte-level token (a special one)
    out.push(b);
  }
  return out;
}

// The bytes of an incomplete UTF-8 sequence at the end of `bytes` (its lead byte on), or [].
function pendingUtf8(bytes) {
  for (let i = bytes.length - 1, back = 0; i >= 0 && back < 4; --i, ++back) {
    const b = bytes[i];
    if ((b & 0xc0) === 0x80) continue;
    const need = b >= 0xf0 ? 4 : b >= 0xe0 ? 3 : b >= 0xc0 ? 2 : 1;
    return bytes.length - i < need ? bytes.slice(i) : [];
  }
  return [];
}

// Whether `bytes` can begin valid UTF-8 (RFC 3629: no C0, C1, F5-FF; no overlong forms after
// E0 or F0, no surrogates after ED, nothing past U+10FFFF after F4).
function validUtf8Prefix(bytes) {
  for (let i = 0; i < bytes.length;) {
    const b = bytes[i];
    if (b < 0x80) { ++i; continue; }
    let need, lo = 0x80, hi = 0xbf;
    if (b >= 0xc2 && b <= 0xdf) need = 1;
    else if (b >= 0xe0 && b <= 0xef) { need = 2; if (b === 0xe0) lo = 0xa0; if (b === 0xed) hi = 0x9f; }
    else if (b >= 0xf0 && b <= 0xf4) { need = 3; if (b === 0xf0) lo = 0x90; if (b === 0xf4) hi = 0x8f; }
    else return false;
    for (let k = 1; k <= need; ++k) {
      if (i + k >= bytes.length) return true;  // cut short: a prefix
      const c = bytes[i + k];
      if (c < (k === 1 ? lo : 0x80) || c > (k === 1 ? hi : 0xbf)) return false;
    }
    i += need + 1;
  }
  return true;
}

// A token xgrammar allows where it would make the output invalid UTF-8, after the bytes of the
// walk so far (`pending`: their incomplete last sequence): its UTF-8 decoding is laxer than ours.
function neverUtf8(token, pending) {
  const bytes = tokenBytes(token);
  return bytes !== null && !validUtf8Prefix(pending.concat(bytes));
}

(async () => {
  const input = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
  const xg = loadXgrammar();
  const vocab = encodedVocab(input.tokenizer_json, input.vocab_size);
  const info = await xg.TokenizerInfo.createTokenizerInfo(vocab, "byte_level", false, input.vocab_size, [input.eos]);
  const compiler = await xg.GrammarCompiler.createGrammarCompiler(info);
  const report = { cases: [], masks_compared: 0, masks_equal: 0, tokens_compared: 0, tokens_disagreeing: 0,
                   invalid_utf8_only_xgrammar_allows: 0 };
  for (const c of input.cases) {
    let compiled;
    try {
      if (c.kind === "json_schema") compiled = await compiler.compileJSONSchema(c.text, false, -1, [", ", ": "], true);
      else if (c.kind === "json_object") compiled = await compiler.compileJSONSchema('{"type": "object"}', false, -1, [", ", ": "], true);
      else if (c.kind === "ebnf") compiled = await compiler.compileGrammar(c.text);
      else if (c.kind === "regex") compiled = await compiler.compileStructuralTag({ type: "structural_tag", format: { type: "regex", pattern: c.text } });
      else throw new Error("unknown kind " + c.kind);
    } catch (e) {
      report.cases.push({ name: c.name, error: "xgrammar could not compile it: " + String(e) });
      continue;
    }
    const matcher = await xg.GrammarMatcher.createGrammarMatcher(compiled);
    const entry = { name: c.name, steps: c.masks.length, disagreements: [] };
    let written = [];  // the walk's bytes so far (their incomplete last UTF-8 sequence matters)
    for (let step = 0; step < c.masks.length; ++step) {
      const ours = new Uint32Array(Buffer.from(c.masks[step], "base64").buffer.slice(0));
      const theirs = new Uint32Array((await matcher.getNextTokenBitmask()).buffer);
      report.masks_compared += 1;
      report.tokens_compared += input.vocab_size;
      let differ = [];
      for (let w = 0; w < ours.length; ++w) {
        const x = (ours[w] ^ theirs[w]) >>> 0;
        if (x === 0) continue;
        for (let b = 0; b < 32; ++b) if ((x >>> b) & 1) differ.push(w * 32 + b);
      }
      differ = differ.filter((id) => id < input.vocab_size);
      const pending = pendingUtf8(written);
      const known = differ.filter((id) => !((ours[id >> 5] >>> (id & 31)) & 1) && neverUtf8(vocab[id], pending));
      report.invalid_utf8_only_xgrammar_allows += known.length;
      differ = differ.filter((id) => !known.includes(id));
      if (differ.length === 0) report.masks_equal += 1;
      else {
        report.tokens_disagreeing += differ.length;
        entry.disagreements.push({
          step,
          count: differ.length,
          examples: differ.slice(0, 8).map((id) => ({ id, token: vocab[id],
            ours: Boolean((ours[id >> 5] >>> (id & 31)) & 1) })),
        });
      }
      if (step < c.tokens.length && !matcher.acceptToken(c.tokens[step])) {
        entry.disagreements.push({ step, rejected_token: c.tokens[step], token: vocab[c.tokens[step]] });
        break;
      }
      if (step < c.tokens.length) written = written.concat(tokenBytes(vocab[c.tokens[step]]) || []).slice(-8);
    }
    report.cases.push(entry);
  }
  console.log(JSON.stringify(report, null, 1));
  const ok = report.cases.every((c) => !c.error && c.disagreements.length === 0);
  process.exit(ok ? 0 : 1);
})().catch((e) => {
  console.error(e);
  process.exit(2);
});
