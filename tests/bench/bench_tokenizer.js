// bench_tokenizer.js: @huggingface/tokenizers' encode speed on a document
// list, timed from inside (the load is not counted; one warm-up pass over
// the first documents is not either).
//
//   node bench_tokenizer.js ORACLES_DIR TOKENIZER.json CONFIG.json DOCS.json
//
// Prints one JSON line: {"bytes": .., "tokens": .., "seconds": .., "mbps": ..}
'use strict';
const fs = require('fs');
const path = require('path');
const [oracles, tokPath, cfgPath, docsPath] = process.argv.slice(2);
const req = require('module').createRequire(path.join(path.resolve(oracles), 'package.json'));
const { Tokenizer } = req('@huggingface/tokenizers');
const tok = new Tokenizer(JSON.parse(fs.readFileSync(tokPath, 'utf8')),
                          JSON.parse(fs.readFileSync(cfgPath, 'utf8')));
const docs = JSON.parse(fs.readFileSync(docsPath, 'utf8'));
for (const d of docs.slice(0, 20)) tok.encode(d);
let bytes = 0;
for (const d of docs) bytes += Buffer.byteLength(d);
let tokens = 0;
const t0 = process.hrtime.bigint();
for (const d of docs) tokens += tok.encode(d).ids.length;
const s = Number(process.hrtime.bigint() - t0) / 1e9;
console.log(JSON.stringify({ bytes, tokens, seconds: s, mbps: bytes / 1e6 / s }));
