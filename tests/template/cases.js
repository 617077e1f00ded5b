// cases.js: the chat requests the template tests render, generated from a
// fixed seed (mulberry32), so every run renders the same bytes.
//
//   generate(family, n)  n requests covering each branch of the family's
//                        template (system or not, tools, tool calls and
//                        responses, reasoning, </think> in content, the
//                        template variables, parts arrays, empty contents,
//                        unicode and JavaScript whitespace at the edges)
//   errorCases(family)   requests the template itself refuses
//                        (raise_exception), named for the branch, and a
//                        few edges next to them that render
//
// A request is an OpenAI /v1/chat/completions body (messages, tools,
// chat_template_kwargs, add_generation_prompt); oracle.js turns it into the
// template context the way gatewayd/text/template.h says.
'use strict';

function mulberry32(seed) {
  return function () {
    seed |= 0;
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const TEXTS = [
  'What is the capital of France?',
  'List the files here.',
  'Hello!',
  'Write a function that adds two numbers.\n\n```python\ndef add(a, b):\n    return a + b\n```',
  '你好，世界。今天天气怎么样？',
  'Привет, как дела?',
  'مرحبا بالعالم',
  'नमस्ते दुनिया',
  'emoji 🙂👍🏽👨‍👩‍👧 and flags 🇫🇷',
  'combining e\u0301 a\u0308 and \u0915\u094d\u0937',
  'ｆｕｌｌ　ｗｉｄｔｈ',
  'quotes " and \\ backslash and \t tab',
  'html <b>bold</b> &amp; <i>it</i> < > &',
  'control \u0001\u0007\u001f bytes',
  'line\u2028separator and para\u2029graph',
  'a very long line ' + 'lorem ipsum dolor sit amet '.repeat(20),
  'numbers 1234567890 3.14159 -42 1e10',
  '<tool_call>\n{"name": "x"}\n</tool_call> in user text',
  '<|im_start|>not special here<|im_end|>',
];

// Whitespace that JavaScript's trim() removes, and two it keeps.
const EDGES = ['', '', '', ' ', '\n', '\n\n', ' \n\t', '\u00a0', '\u3000',
  '\ufeff', '\u2028', '\r\n', '\u0085', '\u180e', '\u2003'];

const THINKS = [
  '<think>\nLet me think.\n</think>\n\nThe answer is 4.',
  'reasoning without an open tag</think>answer',
  '<think>first</think>middle</think>last',
  '<think>outer<think>inner</think>\n\nafter',
  '</think>',
  '<think>\n\n</think>\n\n',
  '  <think> padded </think>  padded answer  ',
  '<think>多语言推理</think>\n\n答案',
];

const REASONINGS = ['I should run ls -la.', '', '\n\nPadded reasoning.\n\n',
  '多步推理：先查看文件。', ' \u00a0edge\u3000', 'multi\nline\nreasoning'];

function makeRng(seed) {
  const r = mulberry32(seed);
  const api = {
    f: r,
    int: (n) => Math.floor(r() * n),
    pick: (a) => a[Math.floor(r() * a.length)],
    chance: (p) => r() < p,
  };
  return api;
}

function text(g) {
  const t = g.pick(TEXTS);
  return g.pick(EDGES) + t + g.pick(EDGES);
}

// Numbers whose printing differs between languages.
const NUMBERS = [0, 1, -1, 42, 1.5, -0.25, 0.1, 1e21, 1e-7, 123456.789,
  12345678901234567890, 9007199254740993, 5e-324, 1.7976931348623157e308,
  2.5e-5, 100, 1e20, 0.000001, 3.141592653589793, -1234.5e10];

function number(g) {
  if (g.chance(0.7)) return g.pick(NUMBERS);
  const x = (g.f() - 0.5) * Math.pow(10, g.int(30) - 10);
  return g.chance(0.5) ? x : Math.round(x);
}

function argValue(g, depth, allowNull) {
  const k = g.int(depth > 1 ? 5 : 8);
  switch (k) {
    case 0: return text(g);
    case 1: return number(g);
    case 2: return g.chance(0.5);
    case 3: return allowNull ? null : 'null-ish';
    case 4: return g.pick(['', 'ls -la', 'multi\nline\nvalue', 'ü', '{"json": "in a string"}']);
    case 5: case 6: {
      const o = {};
      const keys = ['path', 'b', '2', 'a', '1', 'nested', 'ключ', 'x y'];
      const n = 1 + g.int(4);
      for (let i = 0; i < n; i++) o[g.pick(keys)] = argValue(g, depth + 1, allowNull);
      return o;
    }
    default: {
      const a = [];
      const n = g.int(4);
      for (let i = 0; i < n; i++) a.push(argValue(g, depth + 1, allowNull));
      return a;
    }
  }
}

const TOOL_NAMES = ['bash', 'read_file', 'search', 'get_weather', 'write'];

function toolSchema(g, name) {
  const props = {};
  const types = ['string', 'integer', 'number', 'boolean', 'object', 'array',
    ['string', 'null']];
  const n = 1 + g.int(4);
  for (let i = 0; i < n; i++) {
    const p = g.pick(['command', 'path', 'limit', 'ratio', 'flag', 'opts', 'items', '1', 'b', 'a']);
    props[p] = { type: g.pick(types), description: g.pick(['The ' + p + '.', 'Какой-то параметр', '<tag> & "quote"', 'émoji 🙂']) };
    if (g.chance(0.2)) props[p].default = number(g);
    if (g.chance(0.15)) props[p].enum = ['a', 'b'];
  }
  const fn = { name, description: g.pick(['Run a command.', 'Read a file\nfrom disk.', '天气查询', 'Search <the> web & more']),
    parameters: { type: 'object', properties: props, required: Object.keys(props).slice(0, 1) } };
  if (g.chance(0.1)) fn.strict = true;
  return { type: 'function', function: fn };
}

function content(g, family, allowMedia) {
  const k = g.int(10);
  if (k < 5) return text(g);
  if (k === 5) return g.pick(['', ' ', '\n\n', '\u3000']);
  if (k === 6 && family !== 'qwen3') return null;
  const parts = [];
  const n = g.int(4);
  for (let i = 0; i < n; i++) {
    if (allowMedia && family !== 'qwen3' && g.chance(0.3)) {
      parts.push(g.pick([{ type: 'image_url', image_url: { url: 'data:image/png;base64,AAAA' } },
        { type: 'image', image: 'x.png' }, { type: 'video', video: 'x.mp4' }, { video: ['a.png', 'b.png'] }]));
    } else if (g.chance(0.2)) {
      parts.push({ text: text(g) }); // no type: a text part all the same
    } else {
      parts.push({ type: 'text', text: text(g) });
    }
  }
  return parts;
}

function toolCall(g, family, id, name) {
  const allowNull = family !== 'qwen3.5'; // 3.5: see template.h
  const args = {};
  const n = g.int(4);
  for (let i = 0; i < n; i++) args[g.pick(['command', 'path', 'limit', '1', 'b', 'a', 'описание', 'opts'])] = argValue(g, 0, allowNull);
  let a;
  switch (g.int(6)) {
    case 0: case 1: a = JSON.stringify(args); break;
    case 2: a = args; break;
    case 3: a = JSON.stringify(args, null, 2); break;
    case 4: a = g.pick(['', '{}', undefined]); break;
    default: a = JSON.stringify(args).replace(/,/g, ', ').replace(/":/g, '": ');
  }
  const fn = { name };
  if (a !== undefined) fn.arguments = a;
  if (g.chance(0.1)) return fn; // the flattened shape {name, arguments}
  return { id: 'call_' + id, type: 'function', function: fn };
}

function assistant(g, family, withCalls, tools, idBase) {
  const m = { role: 'assistant' };
  const k = g.int(8);
  if (k < 3) m.content = text(g);
  else if (k < 5) m.content = g.pick(THINKS);
  else if (k === 5) m.content = '';
  else if (k === 6) m.content = null;
  else m.content = content(g, family, false);
  if (m.content === null && family === 'qwen3' && g.chance(0.5)) delete m.content;
  if (g.chance(0.45)) m.reasoning_content = g.pick(REASONINGS);
  else if (g.chance(0.1)) m.reasoning_content = null;
  if (withCalls) {
    const n = 1 + g.int(3);
    m.tool_calls = [];
    for (let i = 0; i < n; i++) m.tool_calls.push(toolCall(g, family, idBase + i, tools.length ? g.pick(tools).function.name : g.pick(TOOL_NAMES)));
  } else if (g.chance(0.05)) {
    m.tool_calls = [];
  }
  return m;
}

function generate(family, count, seed) {
  const g = makeRng(seed);
  const out = [];
  for (let c = 0; c < count; c++) {
    const req = { messages: [] };
    const useTools = g.chance(0.55);
    const tools = [];
    if (useTools) {
      const n = 1 + g.int(3);
      for (let i = 0; i < n; i++) tools.push(toolSchema(g, TOOL_NAMES[(c + i) % TOOL_NAMES.length]));
      req.tools = tools;
    } else if (g.chance(0.15)) {
      req.tools = g.pick([[], null]);
    }
    if (g.chance(0.6)) req.messages.push({ role: 'system', content: content(g, family, false) });
    const turns = 1 + g.int(4);
    let id = 0;
    for (let t = 0; t < turns; t++) {
      req.messages.push({ role: 'user', content: content(g, family, true) });
      const rounds = g.int(4);
      for (let r = 0; r < rounds; r++) {
        const calls = g.chance(0.55);
        const a = assistant(g, family, calls, tools, id);
        req.messages.push(a);
        if (calls) {
          for (const tc of a.tool_calls) {
            req.messages.push({ role: 'tool', tool_call_id: tc.id || 'x', content: content(g, family, true) });
          }
          id += a.tool_calls.length;
          if (g.chance(0.2)) {
            // a multi-step tool loop written the old way: a user message
            // that is only a tool response
            req.messages.push({ role: 'user', content: g.pick(EDGES.slice(0, 5)) + '<tool_response>\nok\n</tool_response>' + g.pick(EDGES.slice(0, 5)) });
          }
        }
      }
      if (family === 'qwen3' && g.chance(0.08)) {
        req.messages.push({ role: 'system', content: text(g) }); // qwen3 renders a late system turn
      }
      if (family === 'qwen3' && g.chance(0.05)) {
        req.messages.push({ role: 'developer', content: text(g) }); // and skips unknown roles
      }
    }
    if (g.chance(0.25)) req.messages.push(assistant(g, family, false, tools, id));
    const kw = {};
    const et = g.int(6);
    if (et === 1) kw.enable_thinking = true;
    else if (et === 2 || et === 3) kw.enable_thinking = false;
    else if (et === 4) kw.enable_thinking = null;
    const pt = g.int(4);
    if (pt === 1) kw.preserve_thinking = true;
    else if (pt === 2) kw.preserve_thinking = false;
    const re = g.int(5);
    if (re) kw.reasoning_effort = ['xhigh', 'medium', 'low', 'xhigh'][re - 1];
    if (g.chance(0.3)) kw.add_vision_id = g.chance(0.7);
    if (Object.keys(kw).length || g.chance(0.3)) req.chat_template_kwargs = kw;
    const agp = g.int(4);
    if (agp === 1) req.add_generation_prompt = false;
    else if (agp === 2) req.add_generation_prompt = true;
    out.push({ name: family + ' #' + c, request: req });
  }
  return out;
}

function errorCases(family) {
  const u = { role: 'user', content: 'hi' };
  const a = { role: 'assistant', content: 'hello' };
  const s = { role: 'system', content: 'be brief' };
  const list = [
    ['no messages', { messages: [] }],
    ['no user query: assistant only', { messages: [a] }],
    ['no user query: system and tool', { messages: [s, { role: 'tool', content: 'x' }] }],
    ['no user query: only tool responses', { messages: [{ role: 'user', content: ' <tool_response>\nx\n</tool_response>\n' }, a] }],
    ['system not first', { messages: [u, s] }],
    ['system not first, after tools', { messages: [s, u, a, { role: 'system', content: 'again' }, u], tools: [{ type: 'function', function: { name: 'f', parameters: {} } }] }],
    ['unknown role', { messages: [u, { role: 'developer', content: 'x' }] }],
    ['unknown role before the query', { messages: [{ role: 'critic', content: 'x' }, u] }],
    ['system with an image', { messages: [{ role: 'system', content: [{ type: 'image_url', image_url: { url: 'x' } }] }, u] }],
    ['system with a video', { messages: [{ role: 'system', content: [{ type: 'video', video: 'x' }] }, u] }],
    ['system with an image, with tools', { messages: [{ role: 'system', content: [{ type: 'text', text: 'a' }, { image: 'x' }] }, u], tools: [{ type: 'function', function: { name: 'f' } }] }],
    ['content a number', { messages: [{ role: 'user', content: 5 }] }],
    ['content an object', { messages: [u, { role: 'assistant', content: { text: 'x' } }] }],
    ['a part of no known type', { messages: [{ role: 'user', content: [{ type: 'audio', audio: 'x' }] }] }],
    ['reasoning effort high', { messages: [u], chat_template_kwargs: { reasoning_effort: 'high' } }],
    ['reasoning effort a number', { messages: [u], chat_template_kwargs: { reasoning_effort: 5 } }],
    ['reasoning effort true', { messages: [u], chat_template_kwargs: { reasoning_effort: true } }],
    ['reasoning effort a float', { messages: [u], chat_template_kwargs: { reasoning_effort: 1.5 } }],
    ['reasoning effort null', { messages: [u], chat_template_kwargs: { reasoning_effort: null } }],
    ['reasoning effort empty', { messages: [u], chat_template_kwargs: { reasoning_effort: '' } }],
    ['reasoning effort an object', { messages: [u], chat_template_kwargs: { reasoning_effort: { a: 1 } } }],
    ['reasoning effort an array', { messages: [u], chat_template_kwargs: { reasoning_effort: ['a', 1, null, [2], 1.5, true, { k: 'v' }] } }],
    // edges that render: a tool message first, a user message that only
    // starts like a tool response
    ['a tool message first', { messages: [{ role: 'tool', content: 'r' }, u, { role: 'tool', content: 's' }] }],
    ['a user message opening a tool response', { messages: [s, { role: 'user', content: '<tool_response>\nnot closed' }, a] }],
  ];
  return list.map(([name, request]) => ({ name: family + ': ' + name, request }));
}

module.exports = { generate, errorCases };
