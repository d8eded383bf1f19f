#!/usr/bin/env node
'use strict';
// reference_runner.js -- the reference system's benchmark workload on the reference
// implementation (better-sqlite3-multiple-ciphers), exactly as build/rel/bench/bench_reference
// runs it on mailvault: the same SQL, counts, row contents, parameters, profile and output.
// One invocation runs ONE configuration x cipher and prints ONE JSON line
// (bench/results/SCHEMA.md).
//
// USAGE
//   node bench/reference_runner.js --impl-dir DIR --describe FILE --config NAME --cipher NAME
//       [--scale K] [--round R] [--dir DIR] [--no-warmup]
//   --impl-dir   an install made by scripts/install-reference.sh (tools/reference for
//                12.11.1, tools/reference-11.10.0 for 11.10.0); relative to the repository
//   --describe   the output of `bench_reference --describe`: SQL, counts, configurations
//                (one source of truth, so the two sides cannot drift apart)
//   other options as in bench/bench_reference.c
//
// NOTES
//   Keying as the reference's production code does it: PRAGMA cipher, then PRAGMA key with
//   the passphrase (default KDF of the cipher). auto_vacuum is set right after the key,
//   before anything writes page 1 (the reference set it after journal_mode=WAL, where
//   SQLite ignores it). Timed loops hold no parameter generation beyond what the C side does.
//   Warm-up: the whole workload once at scale 1 on another file, discarded (JIT, caches).

const fs = require('fs');
const os = require('os');
const path = require('path');

const REPO = path.resolve(__dirname, '..');
const PKG = 'better-sqlite3-multiple-ciphers';
const PHASES = ['setup', 'insert', 'select', 'update', 'delete'];

function usage(msg) {
  if (msg) process.stderr.write(`reference_runner: ${msg}\n`);
  process.stderr.write('usage: reference_runner.js --impl-dir DIR --describe FILE --config NAME' +
    ' --cipher NAME [--scale K] [--round R] [--dir DIR] [--no-warmup]\n');
  process.exit(2);
}

function parseInteger(text, min, max, what) {
  if (!/^[0-9]+$/.test(text || '')) usage(`${what}: not a number`);
  const v = Number(text);
  if (v < min || v > max) usage(`${what}: out of range ${min}..${max}`);
  return v;
}

function parseArgs(argv) {
  const opts = { scale: 1, round: 0, warmup: true, dir: process.env.TMPDIR || os.tmpdir() };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--no-warmup') { opts.warmup = false; continue; }
    const v = argv[++i];
    if (v === undefined) usage(`${a} needs a value`);
    switch (a) {
      case '--impl-dir': opts.implDir = v; break;
      case '--describe': opts.describe = v; break;
      case '--config': opts.config = v; break;
      case '--cipher': opts.cipher = v; break;
      case '--scale': opts.scale = parseInteger(v, 1, 1000, '--scale'); break;
      case '--round': opts.round = parseInteger(v, 0, 100000, '--round'); break;
      case '--dir': opts.dir = v; break;
      default: usage(`unknown option ${a}`);
    }
  }
  if (!opts.implDir || !opts.describe || !opts.config || !opts.cipher) usage();
  return opts;
}

function loadReference(implDir) {
  const dir = path.join(path.resolve(REPO, implDir), 'node_modules', PKG);
  try {
    return { Database: require(dir), version: require(path.join(dir, 'package.json')).version };
  } catch (e) {
    process.stderr.write(`reference_runner: cannot load ${PKG} from ${dir} ` +
      `(scripts/install-reference.sh): ${e.message}\n`);
    process.exit(1);
  }
}

function sqlQuote(s) {
  return "'" + String(s).replace(/'/g, "''") + "'";
}

function phraseBuffer(phrase, size) {
  return Buffer.from(phrase.repeat(Math.ceil(size / phrase.length)).slice(0, size), 'latin1');
}

function removeFiles(file) {
  for (const suffix of ['', '-wal', '-shm', '-journal']) {
    try { fs.unlinkSync(file + suffix); } catch (e) { if (e.code !== 'ENOENT') throw e; }
  }
}

function fileBytes(file) {
  try { return fs.statSync(file).size; } catch (e) { return 0; }
}

// Byte 20 of the database header: the reserve bytes per page (kept plain by SQLite3MC).
function reserveBytes(file) {
  const fd = fs.openSync(file, 'r');
  try {
    const b = Buffer.alloc(24);
    return fs.readSync(fd, b, 0, 24, 0) === 24 ? b[20] : 0;
  } finally {
    fs.closeSync(fd);
  }
}

function readSettings(db) {
  const get = (name) => db.pragma(name, { simple: true });
  return {
    auto_vacuum: get('auto_vacuum'), journal_mode: get('journal_mode'),
    synchronous: get('synchronous'), temp_store: get('temp_store'),
    cache_size: get('cache_size'), mmap_size: get('mmap_size') ?? 0,
    secure_delete: get('secure_delete'), foreign_keys: get('foreign_keys'),
    wal_autocheckpoint: get('wal_autocheckpoint'), page_size: get('page_size'),
    busy_timeout: get('busy_timeout'),
  };
}

// Open, key, auto_vacuum before page 1, profile, configuration, schema; checks the read-back.
function openAndPrepare(ctx, file) {
  const { Database, spec, config, cipher } = ctx;
  const db = new Database(file);
  if (cipher !== 'none') {
    db.pragma(`cipher=${sqlQuote(cipher)}`);
    db.pragma(`key=${sqlQuote(spec.password)}`);
  }
  db.pragma(`auto_vacuum=${config.auto_vacuum}`);
  for (const sql of spec.profile_sql) db.exec(sql);
  for (const sql of config.extra_sql) db.exec(sql);
  for (const sql of spec.schema_sql) db.exec(sql);
  const s = readSettings(db);
  // (1) auto_vacuum took, (2) WAL, (3) synchronous and (4) temp_store as configured.
  if (s.auto_vacuum !== config.auto_vacuum || s.journal_mode !== 'wal' ||
      s.synchronous !== config.synchronous || s.temp_store !== config.temp_store) {
    throw new Error(`${config.name}: profile did not take: ${JSON.stringify(s)}`);
  }
  s.kdf_iter = cipher !== 'none' ? Number(db.pragma('kdf_iter', { simple: true })) : 0;
  return { db, settings: s };
}

function rowParams(spec, i, raw) {
  return [i + 1, 1 + i % spec.mailboxes, i + 1, spec.date_base + i * spec.date_step_s,
    i % 3 === 0 ? '\\Seen' : null, `Message ${i}`, `sender${i % 100}@example.com`,
    'user@example.com', `<${i}@bench.example>`, raw];
}

function insertRows(db, spec, first, count, raw) {
  const stmt = db.prepare(spec.sql.insert);
  for (let i = first; i < first + count; i++) stmt.run(...rowParams(spec, i, raw));
}

function selectRows(db, spec, count, seedRows) {
  const stmt = db.prepare(spec.sql.select);
  let rows = 0;
  for (let q = 0; q < count; q++) {
    const threshold = (q * spec.stride) % Math.floor(seedRows / 2);
    rows += stmt.all(1 + q % spec.mailboxes, spec.date_base + threshold * spec.date_step_s).length;
  }
  return rows;
}

function updateRows(db, spec, count, seedRows) {
  const stmt = db.prepare(spec.sql.update);
  for (let i = 0; i < count; i++) {
    const info = stmt.run(spec.update_flags[i % 4], 1 + (i * spec.stride) % seedRows);
    if (info.changes !== 1) throw new Error(`UPDATE changed ${info.changes} rows`);
  }
}

function seconds(start) {
  return Number(process.hrtime.bigint() - start) / 1e9;
}

// One timed phase after setup; returns {count, seconds[, rows]}.
function runPhase(ctx, db, phase, scale) {
  const { spec } = ctx;
  const seedRows = spec.counts_per_scale.seed * scale;
  const start = process.hrtime.bigint();
  let count = 0, rows;
  if (phase === 'insert') {
    count = spec.counts_per_scale.insert * scale;
    insertRows(db, spec, seedRows, count, ctx.insertRaw);
  } else if (phase === 'select') {
    count = spec.counts_per_scale.select * scale;
    rows = selectRows(db, spec, count, seedRows);
  } else if (phase === 'update') {
    count = spec.counts_per_scale.update * scale;
    updateRows(db, spec, count, seedRows);
  } else {
    count = db.prepare(spec.sql.delete).run().changes;
  }
  const r = { count, seconds: seconds(start) };
  if (rows !== undefined) r.rows = rows;
  return r;
}

// The whole workload on a new file; returns the record's measured part.
function workload(ctx, file, scale) {
  const { spec } = ctx;
  removeFiles(file);
  const seedRows = spec.counts_per_scale.seed * scale;
  const start = process.hrtime.bigint();
  const { db, settings } = openAndPrepare(ctx, file);
  db.exec('BEGIN');
  insertRows(db, spec, 0, seedRows, ctx.seedRaw);
  db.exec('COMMIT');
  const phases = { setup: { count: seedRows, seconds: seconds(start) } };
  for (const phase of PHASES.slice(1)) phases[phase] = runPhase(ctx, db, phase, scale);
  const size = { db_bytes: fileBytes(file), wal_bytes: fileBytes(file + '-wal') };
  size.total_bytes = size.db_bytes + size.wal_bytes;
  size.page_count = db.pragma('page_count', { simple: true });
  size.freelist_count = db.pragma('freelist_count', { simple: true });
  const rowsAfter = db.prepare('SELECT count(*) FROM messages').pluck().get();
  const sqliteVersion = db.prepare('SELECT sqlite_version()').pluck().get();
  settings.reserve_bytes = reserveBytes(file);
  db.close();
  removeFiles(file);
  for (const p of Object.values(phases)) p.rate_per_s = p.seconds > 0 ? p.count / p.seconds : 0;
  return { phases, settings, size, rows_after: rowsAfter, sqlite_version: sqliteVersion };
}

function main() {
  const opts = parseArgs(process.argv.slice(2));
  const spec = JSON.parse(fs.readFileSync(opts.describe, 'utf8'));
  const config = spec.configs.find((c) => c.name === opts.config);
  if (!config) usage(`unknown configuration ${opts.config}`);
  if (!spec.ciphers.includes(opts.cipher)) usage(`unknown cipher ${opts.cipher}`);
  const { Database, version } = loadReference(opts.implDir);
  const ctx = { Database, spec, config, cipher: opts.cipher,
    seedRaw: phraseBuffer(spec.phrase, spec.seed_raw_bytes),
    insertRaw: phraseBuffer(spec.phrase, spec.insert_raw_bytes) };
  const dir = fs.mkdtempSync(path.join(opts.dir, 'mailvault-bref-js-'));
  try {
    if (opts.warmup) workload(ctx, path.join(dir, 'warmup.db'), 1);
    const r = workload(ctx, path.join(dir, 'timed.db'), opts.scale);
    const record = { schema: spec.schema, impl: 'reference', impl_version: version,
      sqlite_version: r.sqlite_version, config: config.name, cipher: opts.cipher,
      scale: opts.scale, round: opts.round, warmup: opts.warmup, phases: r.phases,
      settings: r.settings, size: r.size, rows_after: r.rows_after,
      runtime: `node ${process.version}` };
    process.stdout.write(JSON.stringify(record) + '\n');
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

main();
