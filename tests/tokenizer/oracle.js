// oracle.js: what @huggingface/tokenizers makes of a corpus.
//
//   node oracle.js ORACLES_DIR TOKENIZER.json CONFIG.json CORPUS.json OUT.json
//   node oracle.js --decode ORACLES_DIR TOKENIZER.json CONFIG.json IDS.json OUT.json
//
// The second form decodes lists of ids (a JSON array of arrays) into a JSON
// array of strings.
//
// OUT.json: {"ids": [[...], ...], "decoded": [...], "nfc": [...]}, one entry
// per corpus string: encode(s).ids, decode(ids) (null for no ids: HF's decode
// refuses an empty list), and the text the model sees: the stretches between
// added tokens each through NFC (HF normalizes after splitting the added
// tokens out, so "<|im_end|>" + U+0338 keeps its '>' where s.normalize()
// would make it U+226F).
'use strict';
const fs = require('fs');
const path = require('path');

const argv = process.argv.slice(2);
const decodeOnly = argv[0] === '--decode';
if (decodeOnly) argv.shift();
const [oracles, tokPath, cfgPath, corpusPath, outPath] = argv;
if (!outPath) {
  console.error('usage: oracle.js ORACLES_DIR TOKENIZER.json CONFIG.json CORPUS.json OUT.json');
  process.exit(2);
}
const req = require('module').createRequire(path.join(path.resolve(oracles), 'package.json'));
const { Tokenizer } = req('@huggingface/tokenizers');
const tok = new Tokenizer(JSON.parse(fs.readFileSync(tokPath, 'utf8')),
                          JSON.parse(fs.readFileSync(cfgPath, 'utf8')));
const corpus = JSON.parse(fs.readFileSync(corpusPath, 'utf8'));
if (decodeOnly) {
  fs.writeFileSync(outPath, JSON.stringify(corpus.map((ids) => tok.decode(ids))));
  process.exit(0);
}
const ids = [], decoded = [], nfc = [];
for (const s of corpus) {
  const e = tok.encode(s).ids;
  ids.push(e);
  decoded.push(e.length ? tok.decode(e) : null);
  nfc.push(tok.splitter_unnormalized.split(s)
    .map((x) => (tok.added_tokens_map.has(x) ? x : x.normalize('NFC'))).join(''));
}
fs.writeFileSync(outPath, JSON.stringify({ ids, decoded, nfc }));
