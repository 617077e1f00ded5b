// openai_sdk.mjs PORT MOOR_SRC: the openai npm SDK (the oracles' copy)
// against a running gateway. Exits 1 with the reason on the first failure.
import { createRequire } from 'module';

const [port, src] = process.argv.slice(2);
const require = createRequire(src + '/.oracles/package.json');
const mod = require('openai');
const OpenAI = mod.default ?? mod.OpenAI ?? mod;
const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`,
  apiKey: 'unused', maxRetries: 0, timeout: 60000 });

function check(cond, what) {
  if (!cond) { console.error('openai sdk: ' + what); process.exit(1); }
}

const base = { model: 'tiny', temperature: 0, max_tokens: 6,
  messages: [{ role: 'user', content: 'Say something.' }] };

// a non-streamed chat
const r = await client.chat.completions.create({ ...base, ignore_eos: true });
check(r.object === 'chat.completion', 'object ' + r.object);
check(r.id.startsWith('chatcmpl-'), 'id ' + r.id);
const m = r.choices[0].message;
check(m.role === 'assistant' && typeof m.content === 'string', 'message');
check(r.choices[0].finish_reason === 'length', 'finish ' + r.choices[0].finish_reason);
check(r.usage.total_tokens === r.usage.prompt_tokens + r.usage.completion_tokens
  && r.usage.completion_tokens === 6, 'usage ' + JSON.stringify(r.usage));

// the same streamed, with usage
const stream = await client.chat.completions.create({ ...base, ignore_eos: true,
  stream: true, stream_options: { include_usage: true } });
let text = '', ids = new Set(), usage = null, finish = null, n = 0;
for await (const c of stream) {
  n++;
  ids.add(c.id);
  if (c.usage) usage = c.usage;
  for (const ch of c.choices) {
    if (ch.delta?.content) text += ch.delta.content;
    if (ch.finish_reason) finish = ch.finish_reason;
  }
}
check(ids.size === 1, 'ids across chunks: ' + [...ids]);
check(text === m.content, `streamed ${JSON.stringify(text)} vs ${JSON.stringify(m.content)}`);
check(finish === 'length', 'stream finish ' + finish);
check(usage && usage.completion_tokens === 6, 'stream usage ' + JSON.stringify(usage));

// tools: a request with tools, then a history with a call and its result
const tools = [{ type: 'function', function: { name: 'get_weather',
  description: 'The weather in a city',
  parameters: { type: 'object', properties: { city: { type: 'string' } },
    required: ['city'] } } }];
const t1 = await client.chat.completions.create({ ...base, tools,
  tool_choice: 'auto', messages: [{ role: 'user', content: 'Weather in Paris?' }] });
check(['stop', 'length', 'tool_calls'].includes(t1.choices[0].finish_reason),
  'tools finish ' + t1.choices[0].finish_reason);
const tc = t1.choices[0].message.tool_calls;
check(tc === undefined || (Array.isArray(tc) && tc.every(c => c.type === 'function'
  && typeof c.function.name === 'string' && typeof c.function.arguments === 'string')),
  'tool_calls ' + JSON.stringify(tc));
const t2 = await client.chat.completions.create({ ...base, tools, messages: [
  { role: 'user', content: 'Weather in Paris?' },
  { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function',
    function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
  { role: 'tool', tool_call_id: 'call_1', content: '{"temp_c": 18}' }] });
check(t2.choices[0].message.role === 'assistant', 'tool result turn');
// streamed with tools
const ts = await client.chat.completions.create({ ...base, tools, stream: true,
  messages: [{ role: 'user', content: 'Weather in Rome?' }] });
let tn = 0;
for await (const c of ts) tn++;
check(tn >= 2, 'streamed tools chunks ' + tn);

// logprobs, whole and streamed through the SDK's types (greedy: the
// sampled token is the first of its top list; each token's bytes decode to
// its text as WHATWG's decoder does): the chunks' entries concatenated are
// the whole reply's; a legacy completion's
const lpReq = { ...base, logprobs: true, top_logprobs: 2 };
const lw = await client.chat.completions.create(lpReq);
const lc = lw.choices[0].logprobs?.content;
check(Array.isArray(lc) && lw.choices[0].logprobs.refusal === null,
  'logprobs ' + JSON.stringify(lw.choices[0].logprobs));
check(lc.length === lw.usage.completion_tokens
  - (lw.choices[0].finish_reason === 'stop' ? 1 : 0),
  `${lc.length} logprobs entries, usage ${JSON.stringify(lw.usage)}`);
check(lc.every(e => typeof e.token === 'string' && typeof e.logprob === 'number'
  && e.logprob <= 0 && Array.isArray(e.bytes) && e.top_logprobs.length === 2
  && Buffer.from(e.bytes).toString('utf8') === e.token
  && e.top_logprobs[0].token === e.token && e.top_logprobs[0].logprob === e.logprob),
  'logprobs entries ' + JSON.stringify(lc));
const ls = await client.chat.completions.create({ ...lpReq, stream: true });
const lsc = [];
for await (const c of ls)
  for (const ch of c.choices) if (ch.logprobs?.content) lsc.push(...ch.logprobs.content);
check(JSON.stringify(lsc) === JSON.stringify(lc),
  `streamed logprobs ${JSON.stringify(lsc)} vs ${JSON.stringify(lc)}`);
const lt = await client.completions.create({ model: 'tiny', temperature: 0,
  max_tokens: 6, prompt: 'The capital of France is', logprobs: 1 });
const ll = lt.choices[0].logprobs;
check(ll && ll.tokens.length === ll.token_logprobs.length
  && ll.tokens.length === ll.top_logprobs.length
  && ll.tokens.length === ll.text_offset.length
  && ll.top_logprobs.every((d, i) => d[ll.tokens[i]] === ll.token_logprobs[i]
    && Object.keys(d).length <= 2)
  && (ll.tokens.some(t => t.includes('\ufffd'))
    || ll.tokens.join('') === lt.choices[0].text),
  'completion logprobs ' + JSON.stringify(lt.choices[0]));
const none = await client.chat.completions.create(base);
check(none.choices[0].logprobs === null, 'logprobs not asked: '
  + JSON.stringify(none.choices[0].logprobs));
console.log(`openai sdk: logprobs of ${lc.length} tokens, whole and streamed`);

// a follow-up turn resumes from the cache
const sys = 'You are a careful assistant who answers briefly. '.repeat(30);
const opts = { headers: { 'x-session-id': 'sdk-conv' } };
const msgs = [{ role: 'system', content: sys }, { role: 'user', content: 'Hello!' }];
const f1 = await client.chat.completions.create({ ...base, messages: msgs }, opts);
msgs.push({ role: 'assistant', content: f1.choices[0].message.content },
  { role: 'user', content: 'And then?' });
const f2 = await client.chat.completions.create({ ...base, messages: msgs }, opts);
const cached = f2.usage.prompt_tokens_details?.cached_tokens;
check(cached > 0 && cached <= f2.usage.prompt_tokens,
  'follow-up cached ' + JSON.stringify(f2.usage));
console.log(`openai sdk: follow-up turn ${f2.usage.prompt_tokens} prompt tokens, ${cached} cached`);

// a 20-turn conversation streamed through the SDK, as opencode sends it:
// the answer's deltas added up and sent back; every follow-up resumes at
// the end anchor (usage.moor.source 'end', the new turn and the template's
// glue re-read), whatever spelling the tokenizer gives the text again
// (the admin token the test stack gives gatewayd: MOOR_ADMIN_TOKEN)
const cl = await fetch(`http://127.0.0.1:${port}/v1/cache/clear`, {
  method: 'POST', body: '{}',
  headers: { authorization: `Bearer ${process.env.MOOR_ADMIN_TOKEN}`,
    'content-type': 'application/json' },
});
check(cl.status === 200, 'clear ' + cl.status);
const conv = [{ role: 'system', content: 'You are a storyteller.' }];
const eopts = { headers: { 'x-session-id': 'sdk-20' } };
let atEnd = 0;
for (let t = 0; t < 20; t++) {
  conv.push({ role: 'user', content: `Part ${t + 1} of the story, please.` });
  const st = await client.chat.completions.create({ model: 'tiny', temperature: 0,
    max_tokens: 24, messages: conv, stream: true,
    stream_options: { include_usage: true } }, eopts);
  let txt = '', u = null;
  for await (const c of st) {
    if (c.usage) u = c.usage;
    for (const ch of c.choices) if (ch.delta?.content) txt += ch.delta.content;
  }
  conv.push({ role: 'assistant', content: txt });
  if (t > 0) {
    check(u && u.moor && u.moor.source === 'end' && u.moor.reread < 40,
      `turn ${t}: ${JSON.stringify(u && u.moor)}`);
    atEnd++;
  }
}
console.log(`openai sdk: ${atEnd} of 19 follow-ups at the end anchor`);

// errors come back as the SDK's typed errors
try {
  await client.chat.completions.create({ ...base, model: 'nope' });
  check(false, 'an unknown model was accepted');
} catch (e) {
  check(e.status === 404 && e.code === 'model_not_found', 'unknown model: ' + e);
}
try {
  await client.chat.completions.create({ ...base, n: 2 });
  check(false, 'n=2 was accepted');
} catch (e) {
  check(e.status === 400 && e.param === 'n', 'n=2: ' + e);
}
// models
const models = await client.models.list();
check(models.data.length === 1 && models.data[0].id === 'tiny', 'models');
console.log('openai sdk: ok');
