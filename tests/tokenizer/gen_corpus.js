// gen_corpus.js: the tokenizer oracle corpus, deterministic (no clock, no
// Math.random): hand-picked strings of every kind the brief names, then
// strings from a seeded generator. Writes a JSON array of strings.
//
//   node gen_corpus.js OUT.json          the test corpus (~2,500 strings)
//   node gen_corpus.js --bench MB OUT.json  one large mixed document list
//   node gen_corpus.js --codepoints OUT.json  every code point of planes 0-3
//       and 14 (and samples of 4-13, 15, 16) in chunks of CHUNK, each in
//       letter, digit and space contexts; OUT.json.assigned: the [lo, hi]
//       ranges node's Unicode assigns
//
// Nothing here may be a lone surrogate (JSON and UTF-8 cannot carry one).
'use strict';
const fs = require('fs');

// xorshift32, seeded: the corpus is the same on every machine.
function rng(seed) {
  let x = seed >>> 0 || 1;
  const next = () => {
    x ^= x << 13; x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5; x >>>= 0;
    return x;
  };
  return {
    int: (n) => next() % n,
    pick: (a) => a[next() % a.length],
    chance: (p) => next() / 4294967296 < p,
  };
}

const out = [];
const add = (...xs) => { for (const x of xs) out.push(x); };

// --- Latin with accents, NFC and NFD -----------------------------------------
const latin = [
  'café', 'naïve résumé', 'Ångström', 'Übergrößenträger', 'façade déjà vu',
  'Việt Nam tiếng Việt có dấu: Nguyễn Thị Minh Khai', 'Łódź źdźbło żółć',
  'Čeština: příliš žluťoučký kůň úpěl ďábelské ódy', 'São Paulo, coração',
  'Ñandú pingüino', 'Ærøskøbing', 'Ελληνικά: άέήίόύώ ΐΰ', 'İstanbul ığdır şç',
  'Română: științe țară', 'Íslenska: þjóð ðæ', 'Hrvatski: đak čćžšđ',
  'Ǆǅǆ ǈǉ ǋǌ', 'ḀḁḂḃ ẞ ṩ ỹ', 'Æsir ŒUVRE œuvre', 'x̧ q̃ ẅ ǘ ǖ',
];
for (const s of latin) add(s, s.normalize('NFD'), s.normalize('NFKD'));
add('e\u0301', 'E\u0301\u0323', 'a\u0323\u0302', 'a\u0302\u0323', 'o\u0308\u0304',
    '\u0301abc', ' \u0301', '1\u0301', '!\u0301', '\n\u0301x', 'A\u030a\u0301',
    'ﬁ ﬂ ﬃ', 'Å Ω K', '\u212b\u2126\u212a', '\u1e9b\u0323');

// --- other scripts ------------------------------------------------------------
const scripts = [
  'Привет, мир! Съешь же ещё этих мягких французских булок, да выпей чаю.',
  'Українська: ґанок, їжак, є, й', 'Ёлка йод щука ъ ь',
  'Γειά σου Κόσμε! Ξεσκεπάζω την ψυχοφθόρα βδελυγμία.',
  'مرحبا بالعالم! هذه جملة عربية مع تشكيل: بِسْمِ اللَّهِ الرَّحْمَنِ الرَّحِيمِ',
  'العربية ١٢٣٤٥٦٧٨٩٠ و ۱۲۳ فارسی', 'שלום עולם! עִבְרִית עם ניקוד: בְּרֵאשִׁית',
  'नमस्ते दुनिया! हिन्दी में लिखा गया वाक्य। क्षत्रिय ज्ञान', 'संस्कृतम् ॐ ०१२३४५६७८९',
  'สวัสดีชาวโลก ภาษาไทยไม่มีช่องว่างระหว่างคำ ๑๒๓', 'กำ ก่ำ น้ำ',
  '你好，世界！这是一个中文句子。我们测试分词器。', '繁體中文：臺灣的資訊工程',
  '日本語のテキスト：ひらがな、カタカナ、漢字。東京タワー', 'ｶﾀｶﾅ ﾊﾟﾋﾟﾌﾟ',
  '안녕하세요 세계! 한국어 문장입니다.', '한글 자모: ᄒᆞᆫ글 ㅎㅏㄴ',
  'ქართული ენა', 'Հայերեն լեզու', 'ಕನ್ನಡ ತಮಿಳ್ தமிழ் கொ ை', 'বাংলা ভাষা কো',
  'ગુજરાતી ਪੰਜਾਬੀ', 'ລາວ ພາສາ', 'ខ្មែរ', 'မြန်မာ', 'አማርኛ', 'ᠮᠣᠩᠭᠣᠯ', 'ꦗꦮ',
  'Tiếng Việt 漢字 한국어 English mixed',
  'ﷺ ﷽', 'Ⓐⓑⓒ ⅰⅱⅲ Ⅻ', '𝐀𝐁𝐂 𝑥𝑦𝑧 𝟘𝟙𝟚', '𐍈 𐌰𐌱 𓀀𓀁', '𠀀𠀁 𪚥',
];
for (const s of scripts) add(s, s.normalize('NFD'));

// combining marks: stacks, marks after everything, marks without a
// precomposed form (what the 248k family's \p{M} pre-tokenizer changes)
add('Z̷̢̛̪͎̩̲͚̝͕̣̖̣̄̎̈̋̔͆̑̚͘a̴̧̛̘̺̱̻̥̓̈́͂̽̀́͗̕l̵̡̗̳̠̹̓̽̀̈́̈͌g̸̱̺̞̈́̓o̷̧̜̳͙̍̈́',
    'q\u0301 x\u0302 j\u0307\u0301', 'hello\u0301world', 'a\u0332b\u0332c\u0332',
    '\u20dd\u20de', 'x\u20e3', '\u0903\u093e', 'क\u093f', 'ก\u0e31\u0e49',
    '\u0591\u05b0', 'ab\u0300 cd\u0300', 'ʰᵃ˞ˠ', '\u200d', '\u200c\u200d',
    ' \u0300 \u0300\u0300', '\t\u0301', '\u0301\u0301\u0301', '..\u0301..');

// --- emoji --------------------------------------------------------------------
add('😀😃😄 🙂🙃', '👍🏻👍🏼👍🏽👍🏾👍🏿', '👨‍👩‍👧‍👦 family', '👩🏽‍💻 coder',
    '🏳️‍🌈 🏴‍☠️', '🇫🇷🇩🇪🇯🇵🇺🇸', '🇺🇳flag', '1️⃣ #️⃣ *️⃣', '❤️ ❤ ♥️',
    '🧑‍🤝‍🧑', '🫠🫡🥹', 'text😀text', '😀\n😀\t😀', '🏴󠁧󠁢󠁳󠁣󠁴󠁿 Scotland',
    '©️®️™️', '⌚⌛⏰', '🐈‍⬛', 'ok👌🏾!', '🎉🎉🎉🎉🎉🎉🎉🎉🎉🎉');

// --- code ---------------------------------------------------------------------
add(
  '#include <stdio.h>\nint main(void)\n{\n\tprintf("hello, %s\\n", "world");\n\treturn 0;\n}\n',
  'def f(x: int) -> int:\n    """Docstring."""\n    return x ** 2 + 1  # comment\n\nprint(f(3))\n',
  'const add = (a, b) => a + b;\nconsole.log(`sum: ${add(1, 2)}`);\n// done\n',
  'fn main() {\n    let v: Vec<u32> = (0..10).map(|x| x * 2).collect();\n    println!("{:?}", v);\n}\n',
  'package main\n\nimport "fmt"\n\nfunc main() {\n\tfmt.Println("hi")\n}\n',
  'SELECT id, name FROM users WHERE age >= 18 AND name LIKE \'%son\' ORDER BY id DESC;',
  '<!DOCTYPE html>\n<html><body><div class="x">Hi &amp; bye</div></body></html>',
  '{"key": [1, 2.5, -3e10, true, null], "nested": {"a": "b\\u00e9"}}',
  '#!/bin/sh\nset -eu\nfor f in *.c; do\n  gcc -O2 -c "$f" || exit 1\ndone\n',
  'x = [i for i in range(100) if i % 3 == 0]\r\ny = {k: v for k, v in d.items()}\r\n',
  '    \t  if (a && b || !c) { x += 1; }  \n',
  'public static void main(String[] args) throws IOException {}',
  '    def __init__(self):\n        self._x = None\n        self.__y__ = 0\n',
  'a=b+c*d/e-f%g^h|i&j~k<<l>>m',
  '// TODO(user): fix this!!!\n/* block\n   comment */',
  'std::vector<std::pair<int, std::string>> v{{1, "a"}, {2, "b"}};',
  'C:\\Users\\name\\Documents\\file.txt', 'https://example.com/path?q=1&r=%20x#frag',
  'user@example.com', '$HOME/.config/app/config.toml', '0x7fffffff 0b1010 0o777 1e-9',
  '```python\nprint("hi")\n```', '| a | b |\n|---|---|\n| 1 | 2 |',
);

// --- whitespace ---------------------------------------------------------------
const ws = [' ', '  ', '\t', '\n', '\r\n', '\r', '\v', '\f', '\u00a0', '\u3000',
            '\u2028', '\u2029', '\u0085', '\u2003', '\u202f', '\u205f', '\u1680', '\ufeff', '\u200b'];
for (const a of ws) {
  add(a, 'x' + a + 'y', a + 'x', 'x' + a, a + a + a, 'x' + a + a + ' y', 'x ' + a + 'y');
}
add('   ', '      leading', 'trailing      ', '\n\n\n', '\n \n \n', ' \n', '\n ',
    'a\n\nb', 'a \n b', 'a  \n  b', '\t\t\tindented', 'mixed \t \n \r\n \t end',
    'line1\r\nline2\r\n\r\nline4', '\r\n\r\n\r\n', '\r\r\n\n', 'x\r', 'end.  ', 'end.\n\n',
    ' '.repeat(100), '\n'.repeat(50), '\t'.repeat(30) + 'x', ' \t'.repeat(40), 'a' + ' '.repeat(17) + 'b');

// --- numbers ------------------------------------------------------------------
add('12345678901234567890', '3.14159265358979323846', '1,000,000.00', '-42', '+7',
    '2024-01-15T12:34:56Z', '192.168.0.1', '(555) 123-4567', '1st 2nd 3rd 4th',
    '0', '00000', '9'.repeat(300), '١٢٣٤٥', '۰۱۲۳', '０１２３４', '²³¹ ½ ¾ ⅓', '①②③',
    'x1y2z3', 'v1.2.3-rc.4', '1e100', '$1,234.56', '€50', '100%', '12:30pm', 'Ⅰ Ⅱ Ⅲ');

// --- contractions -------------------------------------------------------------
add("don't won't can't isn't", "I'm you're we've they'll he'd she's it's",
    "DON'T I'M YOU'RE WE'VE THEY'LL HE'D SHE'S", "Don'T wE'Ve", "'s 't 're 've 'm 'll 'd",
    "'S'T'RE'VE'M'LL'D", "rock'n'roll", "''s", "'''", "o'clock", "y'all'd've",
    "it’s typographic", "l'homme d'affaires", "'sx 'tx 'rex", "x's", "'", "' s",
    "'\n", "he said 'hello'",
    // (?i:'s) folds U+017F to s in PCRE2 and Oniguruma, not in tokenizers.js
    "it'\u017f", "'\u017f", "\u017f'\u017f\u017f", "'\u212a", "'\u0130");

// --- punctuation --------------------------------------------------------------
add('!!!', '...', '?!?!?!', '-----', '=====>', '((()))', '[[{{<<>>}}]]', '«quoted»',
    '— – -', '、。「」', '!!!\n\n', '...\r\n', ' !!!', ' ...x', '&&||!!', '~~~```',
    '@#$%^&*()_+', ';;;;', '::', '"\'"\'', '.,;:!?', '¿¡', '†‡•…‰', '«»‹›„“”‘’',
    '\\\\\\', '////', '____', '____init____', '=-=-=-=', '....\n....', '.\n.\n.');

// --- special tokens inside text -----------------------------------------------
const specials = ['<|im_start|>', '<|im_end|>', '<|endoftext|>', '<think>', '</think>',
                  '<tool_call>', '</tool_call>', '<tool_response>', '<|fim_prefix|>', '<|vision_pad|>'];
for (const sp of specials) {
  add(sp, 'a' + sp + 'b', ' ' + sp + ' ', sp + sp, '\n' + sp + '\n', 'word' + sp,
      sp + 'word', 'é' + sp + 'ü', sp.slice(0, -1), sp.slice(1), '<' + sp + '>');
}
add('<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n',
    '<think>\nLet me think about this.\n</think>\n\nThe answer is 42.',
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
    '<|im_start|><|im_end|><|endoftext|>', '<|im_start', '<|im_start|', 'im_start|>',
    '<|unknown|>', '<thinking>', '</think >', '< think>', '<THINK>', '<|IM_START|>',
    '<<|im_end|>>', '<|<|im_start|>|>', 'a<think></think>b', '<think>\u0301',
    '<|im_end|>\u0301', 'e<|im_end|>\u0301', '<|endoftext|><|endoftext|><|endoftext|>');

// --- invalid-looking things ---------------------------------------------------
add('\u0000', 'a\u0000b', '\u0001\u0002\u0003\u001f', '\u007f', '\u0080\u009f',
    '\ue000\uf8ff', '\u{f0000}', '\ufffd', '\ufffd\ufffd', '\ufeffBOM', '\u200bzw\u200bsp',
    '\u202eRTL override\u202c', '\u2066isolate\u2069', '\u{e0061}\u{e0062}', '\ufffe\uffff',
    '\u{10ffff}', '\u{1fffe}', '\\u0041', '&#65;&#x42;', '%E2%82%AC', '\\x00\\xff',
    'ÃƒÂ©', 'Ã©', 'â€™', '\u00ad soft\u00adhyphen', '\u2060word\u2060joiner', '\u034f',
    '\u180e', '\u061c', '\u3164', '\u115f\u1160', '\uac00\u11a7', '\u1100\u1161\u11a7', '\ud7ff\ue000', '\u{1d173}\u{1d17a}');

// --- random strings -----------------------------------------------------------
// Alphabets of blocks that Unicode assigned before 14.0 (PCRE2's tables; see
// README.md), each drawn code point checked assigned by node.
const ranges = {
  ascii: [[0x20, 0x7e]], ascii_letters: [[0x61, 0x7a], [0x41, 0x5a]], digits: [[0x30, 0x39]],
  latin1: [[0xa0, 0xff]], latin_ext: [[0x100, 0x17e], [0x180, 0x24f]], ipa: [[0x250, 0x2ff]],
  marks: [[0x300, 0x36f]], greek: [[0x370, 0x3ff]], cyrillic: [[0x400, 0x4ff]],
  armenian: [[0x531, 0x587]], hebrew: [[0x591, 0x5f4]], arabic: [[0x600, 0x6ff]],
  devanagari: [[0x900, 0x97f]], bengali: [[0x980, 0x9fe]], tamil: [[0xb82, 0xbfa]],
  thai: [[0xe01, 0xe5b]], georgian: [[0x10a0, 0x10ff]], jamo: [[0x1100, 0x11ff]],
  latin_add: [[0x1e00, 0x1eff]], greek_ext: [[0x1f00, 0x1ffe]], punct: [[0x2000, 0x206f]],
  symbols: [[0x20a0, 0x20c0], [0x2100, 0x214f], [0x2190, 0x23ff], [0x2460, 0x27bf]],
  cjk_punct: [[0x3000, 0x303f]], kana: [[0x3041, 0x3096], [0x30a1, 0x30fa]],
  cjk: [[0x4e00, 0x9fa5]], hangul: [[0xac00, 0xd7a3]], compat: [[0xf900, 0xfa2d], [0xfb00, 0xfb4f]],
  fullwidth: [[0xff01, 0xffef]], emoji: [[0x1f300, 0x1f5ff], [0x1f600, 0x1f64f], [0x1f900, 0x1f9ff]],
  math: [[0x1d400, 0x1d7ff]], cjk_b: [[0x20000, 0x2a6dd]],
};
const names = Object.keys(ranges);
const assigned = /^\P{Cn}$/u;
function draw(r, name) {
  for (;;) {
    const rs = ranges[name];
    const [lo, hi] = rs[r.int(rs.length)];
    const cp = lo + r.int(hi - lo + 1);
    const c = String.fromCodePoint(cp);
    if (assigned.test(c)) return c;
  }
}
const joiners = [' ', ' ', ' ', '\n', '\t', '  ', '\r\n', "'s", "'t", '. ', ', ', '<|im_end|>', '<think>', '\u200d', '\u0301'];
function random_string(r, maxlen) {
  const nalpha = 1 + r.int(3);
  const alpha = [];
  for (let i = 0; i < nalpha; i++) alpha.push(r.pick(names));
  const len = 1 + r.int(maxlen);
  let s = '';
  while (s.length < len) {
    if (r.chance(0.15)) s += r.pick(joiners);
    else s += draw(r, r.pick(alpha));
  }
  return s;
}

function corpus() {
  const r = rng(20240601);
  for (let i = 0; i < 1500; i++) add(random_string(r, i % 10 === 0 ? 400 : 60));
  // a few long ones: heap-merged words, long runs, long documents
  add('a'.repeat(3000), 'ab'.repeat(1500), '!'.repeat(2000), ' '.repeat(5000) + 'x',
      'x' + '\n'.repeat(3000), '\u0301'.repeat(500), 'Supercalifragilisticexpialidocious'.repeat(40),
      '漢'.repeat(1000), '😀'.repeat(500), '1234567890'.repeat(300));
  let doc = '';
  for (let i = 0; i < 40; i++) doc += out[(i * 37) % out.length] + '\n';
  add(doc);
  return out;
}

// The benchmark corpus: documents shaped like what a chat gateway sees:
// English prose (~45%), code (~20%), prose of other scripts (~20%), chat
// markup with special tokens (~10%), and noise from the random generator.
const words = ('the of and to in is that it for was on are as with his they at be this from ' +
  'have or by one had not but what all were when we there can an your which their said if do ' +
  'will each about how up out them then she many some so these would other into has more her two ' +
  'like him see time could no make than first been its who now people my made over did down only ' +
  'way find use may water long little very after words called just where most know get through back ' +
  'much before go good new write our used me man too any day same right look think also around ' +
  'another came come work three word must because does part even place well such here take why ' +
  'things help put years different away again off went old number great tell men say small every ' +
  'found still between name should home big give air line set own under read last never us left end ' +
  'along while might next sound below saw something thought both few those always looked show large ' +
  'often together asked house world going want school important until form food keep children feet ' +
  'land side without boy once animals life enough took sometimes four head above kind began almost ' +
  'live page got earth need far hand high year mother light parts country father let night following ' +
  'picture being study second eyes soon times story boys since white days ever paper hard near ' +
  'sentence better best across during today others however sure means knew its try told young miles ' +
  'tokenizer server request response cache memory model prefill decode latency throughput').split(' ');
function prose(r, n) {
  let s = '';
  let cap = true;
  for (let i = 0; i < n; i++) {
    let w = r.pick(words);
    if (cap) { w = w[0].toUpperCase() + w.slice(1); cap = false; }
    if (r.chance(0.03)) w = String(r.int(100000));
    if (r.chance(0.02)) w = r.pick(["don't", "it's", "we're", "I'm", "they've", "you'll"]);
    s += w;
    const p = r.int(100);
    if (p < 6) { s += '. '; cap = true; } else if (p < 10) s += ', ';
    else if (p < 11) { s += '.\n\n'; cap = true; } else if (p < 12) s += '? ';
    else s += ' ';
  }
  return s.trim() + '.';
}
function bench(mb) {
  const r = rng(777);
  corpus();
  const code = out.filter((x) => /[;{}()=]/.test(x) && x.length > 40);
  const other = scripts;
  const docs = [];
  let total = 0;
  while (total < mb * 1e6) {
    const target = 2000 + r.int(6000);
    let d = '';
    while (Buffer.byteLength(d) < target) {
      const k = r.int(100);
      if (k < 45) d += prose(r, 20 + r.int(80));
      else if (k < 65) d += r.pick(code).replace(/\b(x|v|f|main|add)\b/g, () => r.pick(words));
      else if (k < 85) d += r.pick(other) + ' ' + r.pick(other);
      else if (k < 95) d += '<|im_start|>' + r.pick(['user', 'assistant', 'system']) + '\n' +
        prose(r, 10 + r.int(30)) + (r.chance(0.3) ? '<think>\n' + prose(r, 20) + '\n</think>\n' : '') + '<|im_end|>\n';
      else d += random_string(r, 100);
      d += r.pick([' ', '\n', '\n\n']);
    }
    docs.push(d);
    total += Buffer.byteLength(d);
  }
  return docs;
}

const CHUNK = 16;
function codepoint_list() {
  const cps = [];
  const span = (lo, hi) => { for (let c = lo; c <= hi; c++) if (c < 0xd800 || c > 0xdfff) cps.push(c); };
  span(0, 0x3ffff);
  for (let p = 4; p <= 13; p++) span(p * 0x10000, p * 0x10000 + 0xff);
  span(0xe0000, 0xe0fff);
  span(0xf0000, 0xf00ff);
  span(0x10ff00, 0x10ffff);
  return cps;
}
function codepoints(outPath) {
  const cps = codepoint_list();
  const strs = [];
  for (let i = 0; i < cps.length; i += CHUNK) {
    let s = '';
    for (const c of cps.slice(i, i + CHUNK)) {
      const x = String.fromCodePoint(c);
      s += 'a' + x + 'a ' + x + '1 ' + x + x + '\n';
    }
    strs.push(s);
  }
  const ranges = [];
  for (let c = 0; c <= 0x10ffff; c++) {
    if (c >= 0xd800 && c <= 0xdfff) continue;
    if (!assigned.test(String.fromCodePoint(c))) continue;
    const last = ranges[ranges.length - 1];
    if (last && last[1] === c - 1) last[1] = c;
    else ranges.push([c, c]);
  }
  fs.writeFileSync(outPath, JSON.stringify(strs));
  fs.writeFileSync(outPath + '.assigned', JSON.stringify({ chunk: CHUNK, ranges }));
}

const args = process.argv.slice(2);
if (args[0] === '--bench') {
  fs.writeFileSync(args[2], JSON.stringify(bench(Number(args[1]))));
} else if (args[0] === '--codepoints') {
  codepoints(args[1]);
} else if (args.length === 1) {
  fs.writeFileSync(args[0], JSON.stringify(corpus()));
} else {
  console.error('usage: gen_corpus.js OUT.json | --bench MB OUT.json | --codepoints OUT.json');
  process.exit(2);
}
