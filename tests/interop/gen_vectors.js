#!/usr/bin/env node
'use strict';
// Generate SQLite3 Multiple Ciphers test vectors with the reference library.
//
//   node tests/interop/gen_vectors.js [OUTDIR]      (default tests/vectors/mc)
//
// Normally run through scripts/make-vectors.sh. Writes the vector files and
// OUTDIR/manifest.json. The row content is deterministic (see rowName/rowData);
// the salts, nonces and IVs chosen by the ciphers are random, so the file
// bytes differ between runs while the decrypted content does not.

const fs = require('fs');
const os = require('os');
const path = require('path');
const crypto = require('crypto');
const { REPO, loadReference, sqlQuote, applyKey, canonicalDigestFromDb, sha256File } =
  require('./mclib');

const { Database, version: PACKAGE_VERSION } = loadReference();

// ---------------------------------------------------------------------------
// Row content: a pure function of id (ids are 1..N, N = the vector's `rows`).
//
//   name(id) = "msg " + id zero-padded to 3 digits + " " + WORDS[id % 8]
//              + (id % 3 == 0 ? " " + "€" repeated (id % 5 + 1) times : "")
//   data(id) = NULL                              if id % 11 == 0
//              else the first len(id) bytes of the chain
//                h1 = SHA256("mailvault-row-" + id), h(k+1) = SHA256(h(k)),
//                data = h1 || h2 || h3 || ...
//   len(id)  = 10240 + (id*id*7919) % 20480      if id % 13 == 0   (10-30 KB:
//                                                   overflow chains)
//              4200 + 8*id                       if id % 10 == 6   (one overflow
//                                                   page at page size 4096)
//              1 + (id*97) % 300                 otherwise
// Names contain no '|' or newline, data is never a zero-length blob.
// ---------------------------------------------------------------------------
const WORDS = ['Grüße aus Köln', 'naïve café', '日本語のテキスト', 'Ελληνικά γράμματα',
  'кириллица', 'emoji 📨✉️🔐', 'Ünïcödé ✓', 'plain ascii'];

function rowName(id) {
  let s = `msg ${String(id).padStart(3, '0')} ${WORDS[id % 8]}`;
  if (id % 3 === 0) s += ' ' + '€'.repeat((id % 5) + 1);
  return s;
}

function rowDataLen(id) {
  if (id % 11 === 0) return null;
  if (id % 13 === 0) return 10240 + ((id * id * 7919) % 20480);
  if (id % 10 === 6) return 4200 + 8 * id;
  return 1 + ((id * 97) % 300);
}

function rowData(id) {
  const len = rowDataLen(id);
  if (len === null) return null;
  const parts = [];
  let h = crypto.createHash('sha256').update(`mailvault-row-${id}`, 'utf8').digest();
  let total = 0;
  while (total < len) {
    parts.push(h);
    total += h.length;
    h = crypto.createHash('sha256').update(h).digest();
  }
  return Buffer.concat(parts).subarray(0, len);
}

// Digest of the canonical dump (see mclib.canonicalDigestFromDb) computed
// directly from the generator function.
function expectedDigest(n) {
  const h = crypto.createHash('sha256');
  for (let id = 1; id <= n; id++) {
    const d = rowData(id);
    h.update(`${id}|${rowName(id)}|${d === null ? '' : d.toString('hex').toUpperCase()}\n`, 'utf8');
  }
  return h.digest('hex');
}

// ---------------------------------------------------------------------------
// Keys
// ---------------------------------------------------------------------------
const PW_ASCII = 'mailvault-vector-password';
const PW_UTF8 = 'pässwörd ✓ 密码 🔑';
const RAW_KEY = crypto.createHash('sha256').update('mailvault raw key').digest('hex');
const RAW_SALT = crypto.createHash('sha256').update('mailvault raw salt').digest('hex').slice(0, 32);
const KEY_RAW = `x'${RAW_KEY}'`;                 // 67 chars: raw 32-byte key
const KEY_RAWSALT = `x'${RAW_KEY}${RAW_SALT}'`;  // 99 chars: key + 16-byte salt

const SMALL = 12;  // ids 1..12: one single-overflow row (at 4096), one NULL
const FULL = 40;   // ids 1..40: adds three 10-30 KB overflow chains

// ---------------------------------------------------------------------------
// Vector list
// ---------------------------------------------------------------------------
const CIPHERS = [
  { tag: 'chacha20', cipher: 'chacha20', legacy: 0 },
  { tag: 'aes256cbc', cipher: 'aes256cbc', legacy: 0 },
  { tag: 'sqlcipher', cipher: 'sqlcipher', legacy: 0 },
  { tag: 'sqlcipher-legacy4', cipher: 'sqlcipher', legacy: 4 },
];

function buildCases() {
  const cases = [];
  const add = (c, suffix, o) => cases.push({
    name: `${c.tag}-${suffix}`, cipher: c.cipher, legacy: c.legacy,
    key: PW_ASCII, page_size: 4096, journal_mode: 'delete', kind: 'clean', rows: SMALL, ...o,
  });
  for (const c of CIPHERS) {
    add(c, 'delete', { rows: FULL });
    add(c, 'wal', { journal_mode: 'wal' });
    add(c, 'walsnap', { journal_mode: 'wal', kind: 'walsnap' });
    add(c, 'hotjournal', { kind: 'hotjournal' });
  }
  const byTag = Object.fromEntries(CIPHERS.map((c) => [c.tag, c]));
  for (const t of ['chacha20', 'sqlcipher']) {
    add(byTag[t], 'p8192-delete', { page_size: 8192, rows: FULL });
    add(byTag[t], 'p8192-wal', { page_size: 8192, journal_mode: 'wal' });
  }
  for (const t of ['chacha20', 'aes256cbc', 'sqlcipher', 'sqlcipher-legacy4']) {
    add(byTag[t], 'utf8pw-delete', { key: PW_UTF8 });
  }
  for (const t of ['chacha20', 'sqlcipher']) {
    add(byTag[t], 'rawkey-delete', { key: KEY_RAW });
    add(byTag[t], 'rawkeysalt-delete', { key: KEY_RAWSALT });
  }
  for (const c of cases) {
    if (c.legacy && c.page_size !== 4096) fail(`${c.name}: legacy=${c.legacy} needs page size 4096`);
  }
  return cases;
}

// ---------------------------------------------------------------------------
// Generation
// ---------------------------------------------------------------------------
function fail(msg) {
  throw new Error(msg);
}

// Open `file` and configure a NEW database, in this order:
//   PRAGMA cipher; PRAGMA legacy (sqlcipher-legacy4 only); PRAGMA page_size;
//   PRAGMA key; PRAGMA journal_mode.
// `cipher` and `legacy` are only honoured before the key (afterwards they are
// silently ignored for this connection). `page_size` must come before the
// first write and before journal_mode=WAL; with legacy=4 it is ignored (the
// page size is legacy_page_size, default 4096).
function openNew(file, v) {
  const db = new Database(file);
  db.exec(`PRAGMA cipher=${sqlQuote(v.cipher)}`);
  if (v.legacy) db.exec(`PRAGMA legacy=${v.legacy}`);
  db.exec(`PRAGMA page_size=${v.page_size}`);
  db.exec(`PRAGMA key=${sqlQuote(v.key)}`);
  db.exec(`PRAGMA journal_mode=${v.journal_mode === 'wal' ? 'WAL' : 'DELETE'}`);
  const jm = db.pragma('journal_mode', { simple: true });
  if (jm !== v.journal_mode) fail(`${v.name}: journal_mode is ${jm}, want ${v.journal_mode}`);
  return db;
}

function createSchema(db) {
  db.exec('CREATE TABLE t(id INTEGER PRIMARY KEY, name TEXT NOT NULL, data BLOB);' +
    'CREATE INDEX t_name ON t(name);');
}

function insertRows(db, from, to) {
  const ins = db.prepare('INSERT INTO t(id, name, data) VALUES (?, ?, ?)');
  db.transaction(() => {
    for (let id = from; id <= to; id++) ins.run(id, rowName(id), rowData(id));
  })();
}

function checkPageSize(db, v) {
  const ps = db.pragma('page_size', { simple: true });
  if (ps !== v.page_size) fail(`${v.name}: page_size is ${ps}, want ${v.page_size}`);
}

// Each generator works in `work` and returns the list of produced file names
// (main file first).
function genClean(work, v) {
  const file = path.join(work, `${v.name}.db`);
  const db = openNew(file, v);
  createSchema(db);
  insertRows(db, 1, v.rows);
  checkPageSize(db, v);
  db.close();
  for (const ext of ['-wal', '-shm', '-journal']) {
    if (fs.existsSync(file + ext)) fail(`${v.name}: ${ext} left behind after close`);
  }
  return [`${v.name}.db`];
}

function genWalSnap(work, v) {
  const file = path.join(work, `${v.name}.src.db`);
  const db = openNew(file, v);
  db.exec('PRAGMA wal_autocheckpoint=0');
  createSchema(db);
  // Several committed transactions, none of them checkpointed.
  const step = Math.ceil(v.rows / 3);
  for (let from = 1; from <= v.rows; from += step) {
    insertRows(db, from, Math.min(v.rows, from + step - 1));
  }
  checkPageSize(db, v);
  const out = `${v.name}.db`;
  // Copy while the connection is still open: the committed frames are only in
  // the -wal file.
  fs.copyFileSync(file, path.join(work, out));
  fs.copyFileSync(file + '-wal', path.join(work, out + '-wal'));
  db.close();
  const walSize = fs.statSync(path.join(work, out + '-wal')).size;
  const frames = (walSize - 32) / (24 + v.page_size);
  if (!(frames >= 3) || !Number.isInteger(frames)) {
    fail(`${v.name}: WAL copy has ${walSize} bytes (${frames} frames)`);
  }
  return [out, out + '-wal'];
}

function genHotJournal(work, v) {
  const file = path.join(work, `${v.name}.src.db`);
  const db = openNew(file, v);
  createSchema(db);
  insertRows(db, 1, v.rows);
  checkPageSize(db, v);
  const committed = fs.readFileSync(file);
  if (fs.existsSync(file + '-journal')) fail(`${v.name}: journal exists after commit`);
  // A tiny cache forces the pager to spill dirty (uncommitted) pages into the
  // database file; the original pages are then in the journal, which is hot.
  db.exec('PRAGMA cache_size=2');
  db.exec('BEGIN');
  db.prepare("UPDATE t SET name = 'UNCOMMITTED CHANGE', data = NULL WHERE id = 1").run();
  db.prepare('DELETE FROM t WHERE id = 2').run();
  const big = Buffer.alloc(40000);
  for (let i = 0; i < big.length; i++) big[i] = (i * 31 + 7) & 0xff;
  db.prepare("INSERT INTO t(id, name, data) VALUES (1000, 'uncommitted big row', ?)").run(big);
  const out = `${v.name}.db`;
  if (!fs.existsSync(file + '-journal') || fs.statSync(file + '-journal').size === 0) {
    fail(`${v.name}: no non-empty journal while the transaction is open`);
  }
  fs.copyFileSync(file, path.join(work, out));
  fs.copyFileSync(file + '-journal', path.join(work, out + '-journal'));
  db.exec('ROLLBACK');
  db.close();
  const spilled = fs.readFileSync(path.join(work, out));
  if (spilled.equals(committed)) fail(`${v.name}: no cache spill (db copy equals committed state)`);
  return [out, out + '-journal'];
}

// Open a throwaway copy of the vector in a fresh connection and compute the
// canonical digest. The vector files themselves are never opened by SQLite.
function readBack(work, files, v, key = v.key, fn = null) {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'mcvec-'));
  try {
    for (const f of files) fs.copyFileSync(path.join(work, f), path.join(tmp, f));
    const db = new Database(path.join(tmp, files[0]), { fileMustExist: true });
    try {
      applyKey(db, { cipher: v.cipher, legacy: v.legacy, key });
      if (fn) return fn(db);
      const ic = db.pragma('integrity_check', { simple: true });
      if (ic !== 'ok') fail(`${v.name}: integrity_check: ${ic}`);
      const ps = db.pragma('page_size', { simple: true });
      if (ps !== v.page_size) fail(`${v.name}: read back page_size ${ps}`);
      return canonicalDigestFromDb(db);
    } finally {
      db.close();
    }
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true });
  }
}

// A wrong key must be rejected. Normally that is SQLITE_NOTADB on the first
// statement. With a hot journal, SQLite first tries to roll the journal back
// with the wrong key: for the MAC ciphers that fails with SQLITE_CORRUPT
// (the throwaway copy is modified but keeps its journal); for aes256cbc the
// rollback "succeeds" (decrypt+encrypt with the same wrong key is the
// identity) and the magic check then gives SQLITE_NOTADB.
function expectWrongKeyRejected(work, files, v) {
  const ok = v.kind === 'hotjournal' ? ['SQLITE_NOTADB', 'SQLITE_CORRUPT'] : ['SQLITE_NOTADB'];
  try {
    readBack(work, files, v, v.key + 'x');
  } catch (e) {
    if (ok.includes(e.code)) return;
    fail(`${v.name}: wrong key gave unexpected error: ${e.code} ${e.message}`);
  }
  fail(`${v.name}: wrong key was accepted`);
}

function readmeText(m) {
  const rowsTable = m.vectors.map((v) => {
    const files = [v.file, ...v.extra_files].map((f) => `\`${f}\` (${v.sizes[f]})`).join(' + ');
    const key = v.key === PW_ASCII ? 'ascii pw' : v.key === PW_UTF8 ? 'utf-8 pw'
      : v.key === KEY_RAW ? 'raw key' : v.key === KEY_RAWSALT ? 'raw key+salt' : 'other';
    return `| ${files} | ${v.cipher} | ${v.legacy} | ${v.page_size} | ${v.journal_mode} | ` +
      `${v.kind} | ${key} | ${v.rows} |`;
  }).join('\n');
  let total = 0;
  for (const v of m.vectors) for (const s of Object.values(v.sizes)) total += s;
  return `# SQLite3 Multiple Ciphers interop vectors

Encrypted databases written by the reference implementation, npm
\`better-sqlite3-multiple-ciphers\` ${m.package_version}
(${m.sqlite3mc_version}, SQLite ${m.sqlite_version}). They are committed so
the C tests do not need the npm build.

**Do not edit by hand.** Regenerate with \`scripts/make-vectors.sh\`, which runs
\`scripts/install-reference.sh\` and then \`tests/interop/gen_vectors.js\`. The
row content is deterministic; the salts, nonces and IVs are random, so the file
bytes change on every regeneration while the manifest digests do not.

## Content
Table \`t(id INTEGER PRIMARY KEY, name TEXT NOT NULL, data BLOB)\` with index
\`t_name ON t(name)\`, rows \`id = 1..rows\` (rows is 12 or 40). Each row is a
pure function of \`id\`, defined in \`gen_vectors.js\` (\`rowName\`, \`rowData\`):
UTF-8 names with non-ASCII text; \`data\` is NULL when \`id % 11 == 0\`, otherwise
the first len(id) bytes of the chain \`SHA256("mailvault-row-<id>")\`,
\`SHA256(previous)\`, ...; len is 10-30 KB (overflow chains) when
\`id % 13 == 0\`, about 4.2 KB (one overflow page at 4096) when
\`id % 10 == 6\`, else 1-300 bytes.

## Keys
- ASCII password: \`${PW_ASCII}\`
- UTF-8 password: \`${PW_UTF8}\` (${Buffer.byteLength(PW_UTF8)} bytes)
- raw key: \`${KEY_RAW}\` (32-byte key, no KDF; salt random, stored in bytes 0..15)
- raw key + salt: \`${KEY_RAWSALT}\` (the 16-byte salt is used at creation and
  is what bytes 0..15 of the file contain)

The manifest's \`key\` is the exact string given to \`PRAGMA key\` (as a SQL
string literal; the codec receives exactly these UTF-8 bytes).

## How each file was made
On a fresh file: \`PRAGMA cipher=...\`; \`PRAGMA legacy=4\` (legacy4 only);
\`PRAGMA page_size=...\`; \`PRAGMA key=...\`; \`PRAGMA journal_mode=DELETE|WAL\`;
create table + index; insert the rows. \`kind\`:
- \`clean\`: closed normally (a WAL database is checkpointed, its -wal removed).
- \`walsnap\`: \`wal_autocheckpoint=0\`, table and rows committed in 4
  transactions, then \`.db\` and \`.db-wal\` were copied while the connection was
  still open. The main file is page 1 only (no table); all rows are in
  committed, un-checkpointed WAL frames. Opening runs WAL recovery.
- \`hotjournal\`: rows committed, then \`cache_size=2; BEGIN;\` update row 1,
  delete row 2, insert a 40000-byte row 1000; the cache spill wrote uncommitted
  pages into the \`.db\`. \`.db\` and \`.db-journal\` were copied before
  \`ROLLBACK\`. Opening the pair must roll back to the committed rows.

## manifest.json
Top level: \`generator\`, \`package\`, \`package_version\`, \`sqlite3mc_version\`,
\`sqlite_version\`, \`table\`, \`digest_definition\`, \`vectors\`. Each vector:
- \`file\`: main database file; \`extra_files\`: its \`-wal\` / \`-journal\` (must sit
  next to it with the same base name)
- \`cipher\`: \`chacha20\` | \`aes256cbc\` | \`sqlcipher\`; \`legacy\`: 0 or 4
  (4 = real SQLCipher 4 format, header encrypted, page size 4096)
- \`key\`, \`page_size\`, \`journal_mode\` (\`delete\` | \`wal\`), \`kind\`
  (\`clean\` | \`walsnap\` | \`hotjournal\`)
- \`rows\`: expected row count of \`t\` once opened; \`digest\`: see below
- \`sizes\`, \`sha256\`: per file, to detect a test that modified its input

Canonical dump / \`digest\`: for each row of
\`SELECT id, name, hex(data) FROM t ORDER BY id\`, the UTF-8 line
\`id|name|HEXDATA\\n\` (HEXDATA uppercase as SQLite's \`hex()\` gives; NULL ->
empty); \`digest\` is the lowercase hex SHA-256 of the concatenation. It was
computed by reading a throwaway copy of each vector back through the library
(after \`integrity_check\` = ok) and checked against the digest computed
directly from the generator function. \`tests/interop/mc_dump.js\` prints the
same \`rows N\` / \`digest HEX\`.

## Other checks done at generation
- A wrong key is rejected: \`SQLITE_NOTADB\`. For hot-journal vectors the
  library first tries the rollback with the wrong key: MAC ciphers fail with
  \`SQLITE_CORRUPT\` (the copy is modified but keeps its journal, and a later
  open with the right key still recovers); aes256cbc "succeeds" (decrypt then
  re-encrypt with the same wrong key is the identity), deletes the journal and
  then reports \`SQLITE_NOTADB\`.
- walsnap: the WAL copy is a whole number of frames (at least 3) and the
  main file alone does not contain table \`t\`.
- hotjournal: the journal copy is non-empty and the \`.db\` copy differs from
  the committed file (the spill happened).

## Files (${m.vectors.length} vectors, ${total} bytes)
| files (bytes) | cipher | legacy | page size | journal | kind | key | rows |
|---|---|---|---|---|---|---|---|
${rowsTable}
`;
}

function main() {
  const outDir = path.resolve(process.argv[2] || path.join(REPO, 'tests/vectors/mc'));
  const meta = new Database(':memory:');
  const [mcVersion, sqliteVersion] = meta.prepare('SELECT sqlite3mc_version(), sqlite_version()')
    .raw(true).get();
  meta.close();
  const work = fs.mkdtempSync(path.join(os.tmpdir(), 'mcgen-'));

  const vectors = [];
  try {
    for (const v of buildCases()) {
      const t0 = Date.now();
      const files = v.kind === 'walsnap' ? genWalSnap(work, v)
        : v.kind === 'hotjournal' ? genHotJournal(work, v) : genClean(work, v);
      const before = files.map((f) => sha256File(path.join(work, f)));
      const got = readBack(work, files, v);
      const want = expectedDigest(v.rows);
      if (got.rows !== v.rows) fail(`${v.name}: read back ${got.rows} rows, want ${v.rows}`);
      if (got.digest !== want) fail(`${v.name}: digest ${got.digest} != generator ${want}`);
      expectWrongKeyRejected(work, files, v);
      if (v.kind === 'walsnap') {
        // Without its -wal the main file must not contain the rows yet.
        const n = readBack(work, [files[0]], v, v.key,
          (db) => db.prepare("SELECT count(*) FROM sqlite_master WHERE name = 't'").pluck().get());
        if (n !== 0) fail(`${v.name}: main file alone already contains table t`);
      }
      const after = files.map((f) => sha256File(path.join(work, f)));
      if (before.join() !== after.join()) fail(`${v.name}: vector files changed during checks`);
      if (v.key === KEY_RAWSALT) {
        const salt = fs.readFileSync(path.join(work, files[0])).subarray(0, 16).toString('hex');
        if (salt !== RAW_SALT) fail(`${v.name}: stored salt ${salt} != supplied salt ${RAW_SALT}`);
      }
      const sizes = {};
      const hashes = {};
      files.forEach((f, i) => {
        sizes[f] = fs.statSync(path.join(work, f)).size;
        hashes[f] = after[i];
      });
      vectors.push({
        file: files[0], extra_files: files.slice(1), cipher: v.cipher, legacy: v.legacy,
        key: v.key, page_size: v.page_size, journal_mode: v.journal_mode, kind: v.kind,
        rows: v.rows, digest: got.digest, sizes, sha256: hashes,
      });
      process.stderr.write(`  ${v.name}: ${files.map((f) => `${f}=${sizes[f]}`).join(' ')} ` +
        `(${Date.now() - t0} ms)\n`);
    }

    // Replace the previous vectors in outDir.
    fs.mkdirSync(outDir, { recursive: true });
    for (const f of fs.readdirSync(outDir)) {
      if (/\.db(-wal|-journal)?$/.test(f) || f === 'manifest.json' || f === 'README.md') {
        fs.rmSync(path.join(outDir, f));
      }
    }
    for (const v of vectors) {
      for (const f of [v.file, ...v.extra_files]) fs.copyFileSync(path.join(work, f), path.join(outDir, f));
    }
    const manifest = {
      generator: 'tests/interop/gen_vectors.js',
      package: 'better-sqlite3-multiple-ciphers',
      package_version: PACKAGE_VERSION,
      sqlite3mc_version: mcVersion,
      sqlite_version: sqliteVersion,
      table: 't(id INTEGER PRIMARY KEY, name TEXT NOT NULL, data BLOB), index t_name ON t(name)',
      digest_definition: "sha256 over concatenated 'id|name|HEXDATA\\n' lines of " +
        'SELECT id, name, hex(data) FROM t ORDER BY id',
      vectors,
    };
    fs.writeFileSync(path.join(outDir, 'manifest.json'), JSON.stringify(manifest, null, 2) + '\n');
    fs.writeFileSync(path.join(outDir, 'README.md'), readmeText(manifest));
    let total = 0;
    for (const v of vectors) for (const s of Object.values(v.sizes)) total += s;
    process.stdout.write(`gen_vectors: ${vectors.length} vectors, ${total} bytes -> ` +
      `${path.relative(process.cwd(), outDir) || '.'}\n`);
  } finally {
    fs.rmSync(work, { recursive: true, force: true });
  }
}

try {
  main();
} catch (e) {
  process.stderr.write(`gen_vectors: ${e.stack || e.message}\n`);
  process.exit(1);
}
