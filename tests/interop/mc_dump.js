#!/usr/bin/env node
'use strict';
// Open an encrypted database with the SQLite3 Multiple Ciphers reference
// library and dump it (reverse-direction interop checks for the C tests).
//
//   node tests/interop/mc_dump.js FILE --cipher NAME [--legacy N] --key-file PATH
//        [--pragma NAME=VALUE]... [--sql "SELECT ..."] [--copy]
//
//   --key-file PATH  the key string passed to PRAGMA key: the exact bytes of
//                    the file, minus one trailing "\n" if present (keys never
//                    go on the command line). May be "x'<hex>'" for raw keys.
//   --pragma N=V     extra cipher pragma issued before the key (repeatable),
//                    e.g. --pragma legacy_page_size=4096
//   --copy           copy FILE and its -wal/-journal siblings into a temp dir
//                    and open the copy, so the inputs are never modified
//                    (no WAL checkpoint, no hot-journal rollback in place)
//   --sql SQL        print each result row as tab-separated values, one row
//                    per line, no header: NULL -> empty, BLOB -> uppercase
//                    hex, integers exact, reals via JS Number formatting
//   without --sql    run PRAGMA integrity_check (must be "ok") and print
//                      rows N
//                      digest HEX
//                    for the canonical dump of table t: SHA-256 over the
//                    lines "id|name|HEX(data)\n" of
//                    SELECT id, name, hex(data) FROM t ORDER BY id.
//
// Environment: MC_REFERENCE_DIR selects another reference install
// (default tools/reference). Exit status 0 on success, 1 on any error
// (message on stderr; a wrong key gives "file is not a database").

const fs = require('fs');
const os = require('os');
const path = require('path');

const USAGE = 'usage: mc_dump.js FILE --cipher NAME [--legacy N] --key-file PATH ' +
  '[--pragma NAME=VALUE]... [--sql SQL] [--copy]';

function die(msg) {
  process.stderr.write(`mc_dump: ${msg}\n`);
  process.exit(1);
}

function parseArgs(argv) {
  const o = { pragmas: [], copy: false };
  const need = (i, flag) => {
    if (i >= argv.length) die(`${flag} needs a value\n${USAGE}`);
    return argv[i];
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    switch (a) {
      case '--cipher': o.cipher = need(++i, a); break;
      case '--legacy': o.legacy = need(++i, a); break;
      case '--key-file': o.keyFile = need(++i, a); break;
      case '--sql': o.sql = need(++i, a); break;
      case '--copy': o.copy = true; break;
      case '--pragma': {
        const p = need(++i, a);
        const m = /^([A-Za-z_][A-Za-z0-9_]*)=(.*)$/s.exec(p);
        if (!m) die(`bad --pragma '${p}' (want NAME=VALUE)`);
        o.pragmas.push([m[1], /^-?[0-9]+$/.test(m[2]) ? Number(m[2]) : m[2]]);
        break;
      }
      case '-h': case '--help':
        process.stdout.write(USAGE + '\n');
        process.exit(0);
        break;
      default:
        if (a.startsWith('--')) die(`unknown option ${a}\n${USAGE}`);
        if (o.file !== undefined) die(`more than one FILE given\n${USAGE}`);
        o.file = a;
    }
  }
  if (o.file === undefined) die(`no FILE given\n${USAGE}`);
  if (!o.cipher) die(`--cipher is required\n${USAGE}`);
  if (!o.keyFile) die(`--key-file is required\n${USAGE}`);
  if (o.legacy !== undefined && !/^[0-9]+$/.test(o.legacy)) die(`bad --legacy '${o.legacy}'`);
  return o;
}

function readKey(file) {
  let buf;
  try {
    buf = fs.readFileSync(file);
  } catch (e) {
    die(`cannot read key file: ${e.message}`);
  }
  if (buf.length && buf[buf.length - 1] === 0x0a) buf = buf.subarray(0, buf.length - 1);
  const key = buf.toString('utf8');
  if (!Buffer.from(key, 'utf8').equals(buf)) die('key file is not valid UTF-8');
  if (key.includes('\0')) die('key file contains a NUL byte');
  return key;
}

function formatValue(v) {
  if (v === null || v === undefined) return '';
  if (Buffer.isBuffer(v)) return v.toString('hex').toUpperCase();
  return String(v);
}

function main() {
  const o = parseArgs(process.argv.slice(2));
  const key = readKey(o.keyFile);
  if (!fs.existsSync(o.file) || !fs.statSync(o.file).isFile()) die(`${o.file}: no such file`);

  let lib;
  let Database;
  try {
    lib = require('./mclib');
    ({ Database } = lib.loadReference());
  } catch (e) {
    die(e.message);
  }

  let tmp = null;
  let file = o.file;
  if (o.copy) {
    tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'mc_dump-'));
    file = path.join(tmp, path.basename(o.file));
    for (const ext of ['', '-wal', '-journal']) {
      if (fs.existsSync(o.file + ext)) fs.copyFileSync(o.file + ext, file + ext);
    }
  }

  let db = null;
  let status = 0;
  try {
    db = new Database(file, { fileMustExist: true });
    lib.applyKey(db, {
      cipher: o.cipher,
      legacy: o.legacy === undefined ? undefined : Number(o.legacy),
      extra: o.pragmas,
      key,
    });
    const out = [];
    if (o.sql !== undefined) {
      const stmt = db.prepare(o.sql);
      if (stmt.reader) {
        stmt.raw(true).safeIntegers(true);
        for (const row of stmt.iterate()) out.push(row.map(formatValue).join('\t'));
      } else {
        stmt.run();
      }
    } else {
      const ic = db.prepare('PRAGMA integrity_check').pluck().all();
      if (ic.length !== 1 || ic[0] !== 'ok') throw new Error(`integrity_check: ${ic.join('; ')}`);
      const { rows, digest } = lib.canonicalDigestFromDb(db);
      out.push(`rows ${rows}`, `digest ${digest}`);
    }
    if (out.length) process.stdout.write(out.join('\n') + '\n');
  } catch (e) {
    process.stderr.write(`mc_dump: ${o.file}: ${e.message}${e.code ? ` (${e.code})` : ''}\n`);
    status = 1;
  } finally {
    try {
      if (db) db.close();
    } catch (e) {
      process.stderr.write(`mc_dump: close: ${e.message}\n`);
      status = 1;
    }
    if (tmp) fs.rmSync(tmp, { recursive: true, force: true });
  }
  process.exitCode = status;
}

main();
